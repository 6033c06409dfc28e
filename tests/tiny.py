"""Tiny random backbones + a word-level tokenizer, built in code (no downloads), for fast CPU tests."""
from __future__ import annotations

import math
from pathlib import Path

from transformers import (AlbertConfig, AutoConfig, AutoModel, BertConfig, BertTokenizerFast, DebertaV2Config,
                          DistilBertConfig, ElectraConfig, IBertConfig, ModernBertConfig, MPNetConfig, RobertaConfig,
                          RoFormerConfig)

WORDS = ("the a an of to and in is was for on that with as by it at from his her he she they this be are were "
         "cat dog man woman car bank river tree city music film game book water food song team war king "
         "plays runs sits eats reads writes sings big small old new good bad red blue green fast slow "
         "guitar piano table chair house street park school ball cup road sky sun moon").split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

#: The encoders with BERT's config names (``hidden_dropout_prob``...) that :func:`tiny_config` builds through
#: ``AutoConfig``, each with its extra settings: the rotary embedding encoders GTE, Nomic BERT and Jina embeddings v3,
#: RoCBert (absolute positions; pronunciation and shape embeddings beside the token's) and BigBird (full attention:
#: its block-sparse attention falls back to it, with a warning, on rows as short as the tests').
BERT_STYLE_CONFIG_ARCHS: dict[str, dict] = {"gte": {}, "nomic_bert": {"head_dim": 16}, "jina_embeddings_v3": {},
                                            "roc_bert": {"pronunciation_vocab_size": 20, "shape_vocab_size": 20},
                                            "big_bird": {"attention_type": "original_full"}}


def tiny_tokenizer(directory: str | Path) -> BertTokenizerFast:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    vocab = directory / "vocab.txt"
    vocab.write_text("\n".join(SPECIAL + list(dict.fromkeys(WORDS))) + "\n")
    return BertTokenizerFast(vocab=str(vocab), do_lower_case=True, model_max_length=64)


def tiny_config(arch: str = "bert", vocab_size: int = 200, dropout: float = 0.1, **overrides):
    """hidden 32, 2 layers, 2 heads; ``arch`` in bert | roberta | distilbert | albert and electra (embeddings of 16) |
    deberta-v2 | mpnet | ibert (its embeddings return a tuple) | roformer (rotary positions) | modernbert (attention
    windows of 8 in every other layer; the tiny tokenizer's special ids) | eurobert |
    :data:`BERT_STYLE_CONFIG_ARCHS` (with their extras)."""
    if arch == "distilbert":
        return DistilBertConfig(vocab_size=vocab_size, dim=32, n_layers=2, n_heads=2, hidden_dim=37,
                                max_position_embeddings=64, dropout=dropout, attention_dropout=dropout,
                                pad_token_id=0, **overrides)
    if arch == "modernbert":
        return ModernBertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=37, max_position_embeddings=70, global_attn_every_n_layers=2,
                                local_attention=8, attention_dropout=dropout, mlp_dropout=dropout, pad_token_id=0,
                                bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3, **overrides)
    if arch == "eurobert":  # Llama-style: RMSNorm, no hidden dropout (its attention's only), grouped-query heads
        return AutoConfig.for_model(arch, vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=2, num_key_value_heads=2, head_dim=16, intermediate_size=37,
                                    max_position_embeddings=70, attention_dropout=dropout, pad_token_id=0,
                                    bos_token_id=2, eos_token_id=3, mask_token_id=4, **overrides)
    if arch in BERT_STYLE_CONFIG_ARCHS:
        overrides = {**BERT_STYLE_CONFIG_ARCHS[arch], **overrides}
        return AutoConfig.for_model(arch, vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=2, intermediate_size=37, max_position_embeddings=70,
                                    hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, pad_token_id=0,
                                    **overrides)
    if arch in ("albert", "electra"):  # factorised embeddings, mapped to the hidden size after them
        overrides = {"embedding_size": 16, **overrides}
    config_class = {"bert": BertConfig, "roberta": RobertaConfig, "albert": AlbertConfig, "electra": ElectraConfig,
                    "deberta-v2": DebertaV2Config, "mpnet": MPNetConfig, "ibert": IBertConfig,
                    "roformer": RoFormerConfig}[arch]
    return config_class(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=70, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout, pad_token_id=0, **overrides)


def save_tiny_backbone(directory: str | Path, arch: str = "bert", seed: int = 0, **config_overrides) -> Path:
    """Save a tiny random backbone + tokenizer to ``directory`` (a stand-in for ``bert-base-uncased``)."""
    import torch

    directory = Path(directory)
    tokenizer = tiny_tokenizer(directory)
    torch.manual_seed(seed)
    model = AutoModel.from_config(tiny_config(arch, vocab_size=len(tokenizer), **config_overrides))
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def zero_last_layer_norm(folder: str | Path) -> Path:
    """Set the last output LayerNorm's weights of the BERT-like backbone saved in ``folder`` to 0: every token's last
    hidden state is then that LayerNorm's bias, whatever the sentence (a degenerate backbone: nan STS scores)."""
    import torch
    from safetensors.torch import load_file, save_file

    folder = Path(folder)
    weights = load_file(folder / "model.safetensors")
    last_norm = max(name for name in weights if name.endswith("output.LayerNorm.weight") and ".attention." not in name)
    save_file({**weights, last_norm: torch.zeros_like(weights[last_norm])}, folder / "model.safetensors",
              metadata={"format": "pt"})
    return folder


def save_tiny_generator(directory: str | Path, seed: int = 1) -> Path:
    """Save a tiny random DistilBERT masked LM + the tiny tokenizer (a stand-in for DiffCSE's generator,
    ``distilbert-base-uncased``, sharing the tiny backbone's vocabulary)."""
    import torch
    from transformers import AutoModelForMaskedLM

    directory = Path(directory)
    tokenizer = tiny_tokenizer(directory)
    torch.manual_seed(seed)
    AutoModelForMaskedLM.from_config(tiny_config("distilbert", vocab_size=len(tokenizer))).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def tiny_corpus(path: str | Path, n: int = 64, seed: int = 0) -> Path:
    """A one-sentence-per-line file of ``n`` random sentences over the tiny vocabulary."""
    import random

    rng = random.Random(seed)
    path = Path(path)
    path.write_text("\n".join(" ".join(rng.choices(WORDS, k=rng.randint(4, 12))) for _ in range(n)) + "\n")
    return path


def tiny_nli_csv(path: str | Path, n: int = 32, seed: int = 0) -> Path:
    """A supervised SimCSE training file (``sent0,sent1,hard_neg``) of ``n`` rows of random sentences over the tiny
    vocabulary."""
    import random

    rng = random.Random(seed)
    path = Path(path)

    def sentence() -> str:
        return " ".join(rng.choices(WORDS, k=rng.randint(4, 9)))

    path.write_text("sent0,sent1,hard_neg\n" + "".join(f"{sentence()},{sentence()},{sentence()}\n" for _ in range(n)))
    return path


def method_script(method: str, folder: str | Path) -> tuple[str, list[str]]:
    """The entry point that trains ``method`` (``run_unsup`` or ``run_diffcse``) and the method's flags for it:
    DiffCSE's with a tiny generator saved under ``folder``."""
    if method == "diffcse":
        return "run_diffcse", ["--generator_name", str(save_tiny_generator(Path(folder) / "generator"))]
    return "run_unsup", ["--method", method]


FAST_TRAINING_ARGS = ["--per_device_train_batch_size", "8", "--logging_steps", "1", "--disable_tqdm", "true",
                      "--dataloader_pin_memory", "false", "--use_cpu", "true", "--report_to", "none", "--bf16", "false"]
"""Command-line flags that make a run_unsup.py / run_diffcse.py training test small, CPU-only and fp32 (pinned: the
default is bf16 on a CPU with native bf16, so recorded numbers would depend on the machine)."""


def token_batch(b: int = 4, v: int = 2, length: int = 9, seed: int = 0, same_views: bool = False):
    """Random ids ``[b, v, length]`` over the tiny vocabulary and an attention mask whose first sentence has 3
    padding positions; ``same_views`` makes every view a copy of view 0 (SimCSE's two dropout views)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (b, v, length), generator=g)
    if same_views:
        ids[:, 1:] = ids[:, :1]
    mask = torch.ones_like(ids)
    mask[0, :, -3:] = 0
    return ids, mask


def cosine(a: list[float], b: list[float]) -> float:
    """Cosine similarity written out in plain Python (the independent side of the loss tests)."""
    return sum(x * y for x, y in zip(a, b)) / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def tiny_trainer(model, backbone: str | Path, output_dir: str | Path, corpus: str | Path, max_steps: int = 3,
                 **training_args):
    """A CPU ``CLTrainer`` over ``corpus`` for ``model`` (built on the tiny ``backbone``): batch 8, a log line per
    step, fp32, no evaluation or checkpoints; ``training_args`` override those."""
    from transformers import AutoTokenizer

    from data.corpus import load_unsup_corpus
    from command_line.arguments import CLTrainingArguments
    from trainers.cl_trainer import CLTrainer
    from trainers.methods import build_collator

    tokenizer = AutoTokenizer.from_pretrained(str(backbone))
    settings = dict(max_steps=max_steps, per_device_train_batch_size=8, eval_strategy="no", save_strategy="no",
                    load_best_model_at_end=False, evaluate_at_start=False, logging_steps=1, use_cpu=True,
                    disable_tqdm=True, dataloader_pin_memory=False, bf16=False)
    args = CLTrainingArguments(output_dir=str(output_dir), **{**settings, **training_args})
    return CLTrainer(model=model, args=args, train_dataset=load_unsup_corpus(corpus),
                     data_collator=build_collator(model, tokenizer, 32), processing_class=tokenizer)


def official_diffcse_settings() -> dict:
    """``--fidelity official_code``'s DiffCSE settings (the preset's settings of DiffCSE's group): the released code's
    loss over padding, conditioning site, argmax over every position of both views, generator in training mode."""
    import dataclasses

    from models.config import ContrastiveConfig
    from models.presets import fidelity_overrides

    diffcse = {field.name for field in dataclasses.fields(ContrastiveConfig)
               if field.metadata.get("group") == "diffcse"}
    return {key: value for key, value in fidelity_overrides("official_code").items() if key in diffcse}
