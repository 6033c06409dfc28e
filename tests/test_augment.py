"""ESimCSE's augmentations (data/augment.py): the repetition length rules (property tests and the exact
distribution of the added length for every sentence length), what is repeated or inserted, special tokens never
touched, the positive never cut (unless re-truncation is asked for), per-epoch resampling vs caching, independence
from the batch split; and length bucketing (data/length_buckets.py)."""
from __future__ import annotations

import random
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import BertConfig, BertForMaskedLM

from data.augment import STOP_WORDS, LengthExtender, MaskedLMFiller, dup_length
from data.length_buckets import bucket_sentences, bucketing_record, bucketing_warning, length_bucket
from data.length_buckets import main as bucket_main
from tests.tiny import WORDS, tiny_tokenizer

CLS, SEP, MASK, UNK = 2, 3, 4, 1  # tests/tiny.py vocabulary: [PAD] [UNK] [CLS] [SEP] [MASK] words...


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def piece_tokenizer(tmp_path_factory):
    """A WordPiece vocabulary with continuation pieces, so words span several tokens."""
    directory = tmp_path_factory.mktemp("pieces")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "micro", "##bio", "##logy", "is", "fun", "the", "a", "."]
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    from transformers import BertTokenizerFast

    return BertTokenizerFast(vocab=str(directory / "vocab.txt"), do_lower_case=True)


def paper_bound(n: int, rate: float) -> int:
    return min(n, max(2, int(rate * n)))


# ------------------------------------------------------------------------------------------------ length rules
@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 200), rate=st.floats(0.0, 1.0), seed=st.integers(0, 2**32))
def test_dup_length_obeys_its_rule(n, rate, seed):
    rng = random.Random(seed)
    assert 0 <= dup_length(n, rate, "paper", rng) <= paper_bound(n, rate)
    code_upper = min(10, int(rate * n))
    assert 0 <= dup_length(n, rate, "code", rng) <= max(code_upper - 1, 0)


def test_dup_length_covers_its_whole_range():
    rng = random.Random(0)
    paper = Counter(dup_length(20, 0.32, "paper", rng) for _ in range(4000))
    assert set(paper) == set(range(0, 7))  # U{0..int(0.32*20)=6}, both ends included
    code = Counter(dup_length(20, 0.32, "code", rng) for _ in range(4000))
    assert set(code) == set(range(0, 6))  # randrange(6)
    assert set(dup_length(3, 0.32, "paper", rng) for _ in range(500)) == {0, 1, 2}  # max(2, .) floor
    assert {dup_length(3, 0.32, "code", rng) for _ in range(50)} == {0}  # empty range: nothing repeated
    assert max(dup_length(200, 0.32, "code", rng) for _ in range(2000)) == 9  # capped at 10 - 1


def body_without_insertions(ids, inserted):
    return [t for p, t in enumerate(ids) if p not in set(inserted)]


def code_upper(input_len: int, rate: float) -> int:
    """The released code's range: randrange(min(10, int(dup_rate * input_len))), input_len with [CLS] and [SEP]."""
    return min(10, int(rate * input_len))


@settings(max_examples=150, deadline=None)
@given(body=st.lists(st.integers(5, 60), min_size=0, max_size=40), rate=st.floats(0.0, 1.0),
       rule=st.sampled_from(["paper", "code"]), seed=st.integers(0, 1000))
def test_subword_repetition_property(tokenizer, body, rate, rule, seed):
    """The positive is exactly the whole anchor plus copies of some of its tokens, never cut."""
    ids = [CLS] + body + [SEP]
    extender = LengthExtender(tokenizer, dup_rate=rate, rule=rule, seed=seed)
    out = extender([ids])[0]
    inserted = extender.last_inserted[0]
    assert out[0] == CLS and out[-1] == SEP
    assert all(out[p] == out[p - 1] and out[p] not in (CLS, SEP) for p in inserted)  # a copy of the token before
    assert body_without_insertions(out, inserted) == ids
    bound = paper_bound(len(body), rate) if rule == "paper" else max(code_upper(len(ids), rate) - 1, 0)
    assert len(out) - len(ids) == len(inserted) <= bound


@settings(max_examples=100, deadline=None)
@given(body=st.lists(st.integers(5, 60), min_size=0, max_size=40), rate=st.floats(0.0, 1.0),
       truncate_to=st.integers(2, 64), seed=st.integers(0, 1000))
def test_opt_in_truncation_cuts_the_body_from_the_end(tokenizer, body, rate, truncate_to, seed):
    ids = [CLS] + body[: truncate_to - 2] + [SEP]
    extender = LengthExtender(tokenizer, truncate_to, dup_rate=rate, seed=seed)
    out = extender([ids])[0]
    kept = body_without_insertions(out, extender.last_inserted[0])
    assert len(out) <= truncate_to and out[-1] == SEP
    assert kept[:-1] == ids[: len(kept) - 1] and kept[-1] == SEP  # a prefix of the original, [SEP] kept


@settings(max_examples=200, deadline=None)
@given(body=st.lists(st.integers(5, 60), min_size=0, max_size=40), longest=st.integers(2, 42),
       rate=st.floats(0.0, 1.0), rule=st.sampled_from(["paper", "code"]),
       mode=st.sampled_from(["repetition", "stopword", "mask"]), truncate_to=st.sampled_from([None, 2, 12, 30]),
       seed=st.integers(0, 1000))
def test_no_sentence_outgrows_the_longest_output(tokenizer, body, longest, rate, rule, mode, truncate_to, seed):
    """``longest_output(n)`` (a compiled step's fixed width) bounds every result from a sentence of at most n
    tokens, whatever its draw."""
    ids = [CLS] + body[: longest - 2] + [SEP]
    extender = LengthExtender(tokenizer, truncate_to, dup_rate=rate, rule=rule, mode=mode, seed=seed)
    assert len(extender([ids])[0]) <= extender.longest_output(longest)


@pytest.mark.parametrize("rule, rate, expected", [("paper", 0.32, 41), ("code", 0.32, 41), ("paper", 0.1, 35),
                                                  ("code", 0.1, 34), ("paper", 0.0, 34), ("code", 0.0, 32)])
def test_the_longest_output_is_reached(tokenizer, rule, rate, expected):
    """The bound is tight: written out from each rule at 32 tokens (30 sub-words, [CLS] and [SEP]: the paper's
    max(2, int(rate * 30)) units, the code's min(10, int(rate * 32)) - 1), some draw of a 32-token sentence reaches
    it (ESimCSE's defaults: 41, where the bound was 64, twice 32); 30 sentences of 32 tokens, 40 epochs."""
    extender = LengthExtender(tokenizer, dup_rate=rate, rule=rule, seed=0)
    assert extender.longest_output(32) == expected
    sentences = [[CLS] + [5 + (k + j) % 50 for j in range(30)] + [SEP] for k in range(30)]
    longest = 0
    for epoch in range(40):
        extender.set_epoch(epoch)
        longest = max(longest, *(len(ids) for ids in extender(sentences)))
    assert longest == expected


def test_whole_words_repeated_may_double_a_sentence(piece_tokenizer):
    """Repeating whole words adds each picked word's pieces: the bound stays twice the sentence (a two-word
    sentence of 3-piece words, both picked, doubles); inserting one token per word keeps the unit count's bound."""
    words = LengthExtender(piece_tokenizer, dup_rate=0.32, dup_type="word", seed=0)
    assert words.longest_output(32) == 64
    ids = piece_tokenizer("microbiology microbiology")["input_ids"]
    lengths = set()
    for epoch in range(40):
        words.set_epoch(epoch)
        lengths.add(len(words([ids])[0]))
    assert max(lengths) == 2 * len(ids) - 2  # every word repeated: the body twice, [CLS] and [SEP] once
    assert LengthExtender(piece_tokenizer, dup_rate=0.32, dup_type="word", mode="mask").longest_output(32) == 41


def expected_added_length(input_len: int, rate: float, rule: str) -> dict[int, float]:
    """The distribution of the number of repeated sub-words for a sentence of ``input_len`` tokens ([CLS] and
    [SEP] included), written out from each rule's definition:
    - paper (ESimCSE Eq. 3): dup_len uniform on {0, ..., max(2, int(rate * N))}, N = the N = input_len - 2
      sub-words; no more than N distinct sub-words can be picked, so the draw is capped at N;
    - code (caskcsg/sentemb ESimCSE/train.py, dup_type bpe): random.randrange(min(10, int(dup_rate * input_len))),
      uniform on {0, ..., upper - 1}; nothing added when upper is 0 (the code skips the sentence)."""
    n = input_len - 2
    if rule == "paper":
        top = max(2, int(rate * n))
        dist: dict[int, float] = {}
        for k in range(top + 1):
            dist[min(k, n)] = dist.get(min(k, n), 0.0) + 1 / (top + 1)
        return dist
    upper = min(10, int(rate * input_len))
    return {0: 1.0} if upper == 0 else {k: 1 / upper for k in range(upper)}


@pytest.mark.parametrize("rule", ["paper", "code"])
def test_added_length_distribution_for_every_sentence_length(tokenizer, rule):
    """For every sentence length 3..32 at dup_rate 0.32, 600 per-epoch draws of the augmenter follow the rule's
    distribution: the same support, and a chi-square goodness-of-fit p-value above 1e-4 (deterministic: the draws
    are seeded). The body-length N under the code rule (one smaller) changes the support for 17 of the 30 lengths."""
    from scipy.stats import chisquare

    rate, draws = 0.32, 600
    extender = LengthExtender(tokenizer, dup_rate=rate, rule=rule, seed=7)
    mismatched_support = []
    for input_len in range(3, 33):
        ids = [CLS] + [5 + (i % 50) for i in range(input_len - 2)] + [SEP]
        counts: Counter[int] = Counter()
        for epoch in range(draws):
            extender.set_epoch(epoch)
            counts[len(extender([ids])[0]) - input_len] += 1
        expected = expected_added_length(input_len, rate, rule)
        if set(counts) != set(expected):
            mismatched_support.append((input_len, sorted(counts), sorted(expected)))
            continue
        support = sorted(expected)
        if len(support) > 1:
            p_value = chisquare([counts[k] for k in support], [expected[k] * draws for k in support]).pvalue
            assert p_value > 1e-4, (input_len, counts, expected)
    assert not mismatched_support, mismatched_support


def test_code_rule_counts_the_special_tokens():
    """Official: add_len = randrange(min(10, int(0.32 * len(input_ids)))), len with [CLS]/[SEP]: a sentence of 25
    tokens (23 sub-words) can get up to int(0.32 * 25) - 1 = 7 repetitions, not int(0.32 * 23) - 1 = 6."""
    rng = random.Random(0)
    assert max(dup_length(23, 0.32, "code", rng, num_special=2) for _ in range(3000)) == 7
    assert max(dup_length(23, 0.32, "code", rng) for _ in range(3000)) == 6
    assert max(dup_length(23, 0.32, "paper", rng, num_special=2) for _ in range(3000)) == 7  # int(0.32 * 23) = 7


def test_special_tokens_inside_the_body_are_never_repeated(tokenizer):
    ids = [CLS, 10, UNK, 11, UNK, 12, SEP]
    extender = LengthExtender(tokenizer, 64, dup_rate=1.0)
    for seed in range(30):
        extender.seed = seed
        out = extender([ids])[0]
        assert out.count(UNK) == 2 and out.count(CLS) == 1 and out.count(SEP) == 1


def test_word_repetition_repeats_whole_words(piece_tokenizer):
    ids = piece_tokenizer("microbiology is fun microbiology")["input_ids"]
    assert piece_tokenizer.convert_ids_to_tokens(ids)[1:4] == ["micro", "##bio", "##logy"]
    extender = LengthExtender(piece_tokenizer, 64, dup_rate=1.0, dup_type="word")
    seen = set()
    for seed in range(40):
        extender.seed = seed
        tokens = " ".join(piece_tokenizer.convert_ids_to_tokens(extender([ids])[0])[1:-1])
        words = tokens.replace(" ##", "").split()
        seen.add(tokens)
        assert [w for i, w in enumerate(words) if i == 0 or w != words[i - 1]] == ["microbiology", "is", "fun",
                                                                                  "microbiology"]
    assert any("micro ##bio ##logy micro ##bio ##logy" in t for t in seen)
    subs = {" ".join(piece_tokenizer.convert_ids_to_tokens(
        LengthExtender(piece_tokenizer, 64, dup_rate=1.0, dup_type="subword", seed=seed)([ids])[0]))
        for seed in range(40)}
    assert any("##bio ##bio" in t or "micro micro" in t for t in subs)  # sub-words alone repeat too


def test_resampled_per_epoch_but_cached_per_sentence(tokenizer):
    sentence = tokenizer(" ".join(WORDS[:25]))["input_ids"]
    others = [tokenizer(" ".join(WORDS[i:i + 5]))["input_ids"] for i in range(30, 60, 5)]
    fresh = LengthExtender(tokenizer, dup_rate=0.32, resample=True)
    cached = LengthExtender(tokenizer, dup_rate=0.32, resample=False)
    views_by_epoch = set()
    for epoch in range(8):
        fresh.set_epoch(epoch)
        cached.set_epoch(epoch)
        # the draw of a sentence does not depend on the rest of its batch (so not on how a batch is split)
        fresh_views = {tuple(fresh([sentence, other])[0]) for other in others} | {tuple(fresh([sentence])[0])}
        assert len(fresh_views) == 1
        views_by_epoch |= fresh_views
        assert {tuple(cached([sentence, other])[0]) for other in others} == {tuple(cached([sentence])[0])}
    assert len(views_by_epoch) > 1  # a fresh draw every epoch
    assert len({tuple(cached([sentence])[0]) for _ in range(3)}) == 1


def test_batch_split_does_not_change_any_draw(tokenizer):
    """1 x 16 and 2 x 8 (two processes' halves) repeat the same tokens: ESimCSE under DDP = one process."""
    batch = [tokenizer(" ".join(WORDS[i:i + 6 + i % 7]))["input_ids"] for i in range(0, 64, 4)]
    extender = LengthExtender(tokenizer, dup_rate=0.32, seed=42)
    extender.set_epoch(3)
    assert extender(batch) == extender(batch[:8]) + extender(batch[8:])


def test_seed_changes_the_draws(tokenizer):
    batch = [tokenizer(" ".join(WORDS[i:i + 12]))["input_ids"] for i in range(0, 40, 4)]
    a, b = LengthExtender(tokenizer, dup_rate=0.32), LengthExtender(tokenizer, dup_rate=0.32)
    a.set_epoch(0, seed=42)
    b.set_epoch(0, seed=43)
    assert a(batch) != b(batch)


@pytest.mark.parametrize("mode", ["stopword", "mask"])
def test_insertions(tokenizer, mode):
    ids = tokenizer("cat dog man woman car bank river tree city music")["input_ids"]
    extender = LengthExtender(tokenizer, 64, dup_rate=0.5, mode=mode)
    counts = 0
    for seed in range(20):
        extender.seed = seed
        out = extender([ids])[0]
        inserted = extender.last_inserted[0]
        counts += len(inserted)
        assert body_without_insertions(out, inserted) == ids
        tokens = tokenizer.convert_ids_to_tokens([out[p] for p in inserted])
        assert all(t in STOP_WORDS for t in tokens) if mode == "stopword" else all(t == "[MASK]" for t in tokens)
    assert counts > 0


def test_masked_lm_prediction_fills_inserted_masks(tokenizer):
    torch.manual_seed(0)
    mlm = BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=37))
    filler = MaskedLMFiller(mlm, tokenizer)
    ids = tokenizer("cat dog man woman car bank river tree city music")["input_ids"]
    seed = next(s for s in range(100) if LengthExtender(tokenizer, 64, dup_rate=0.5, mode="mask", seed=s)([ids])[0] != ids)
    masked = LengthExtender(tokenizer, 64, dup_rate=0.5, mode="mask", seed=seed)
    predicted = LengthExtender(tokenizer, 64, dup_rate=0.5, mode="mlm_prediction", filler=filler, seed=seed)
    with_masks, filled = masked([ids])[0], predicted([ids])[0]
    positions = masked.last_inserted[0]
    assert positions and positions == predicted.last_inserted[0]
    logits = mlm(input_ids=torch.tensor([with_masks])).logits[0]
    for p in positions:
        assert filled[p] not in tokenizer.all_special_ids
        allowed = logits[p].clone()
        allowed[tokenizer.all_special_ids] = float("-inf")
        assert filled[p] == int(allowed.argmax())
    assert [t for p, t in enumerate(filled) if p not in positions] == ids


# ------------------------------------------------------------------------------------------------ bucketing
@pytest.mark.parametrize("buc_len", [3, 5, None])
def test_bucketing_makes_single_bucket_batches(tmp_path, buc_len):
    rng = random.Random(1)
    sentences = [" ".join(rng.choices(WORDS, k=rng.randint(1, 12))) + f" s{i}" for i in range(500)]
    ordered = bucket_sentences(sentences, batch_size=16, buc_len=buc_len, seed=42)
    assert sorted(ordered) == sorted(sentences)
    buckets = Counter(length_bucket(s, buc_len) for s in sentences)
    full_batches = sum(count // 16 for count in buckets.values())
    for b in range(full_batches):
        assert len({length_bucket(s, buc_len) for s in ordered[b * 16:(b + 1) * 16]}) == 1
    assert len({length_bucket(s, buc_len) for s in ordered[: 16 * 8]}) > 1  # batches are shuffled across buckets
    source = tmp_path / "in.txt"
    source.write_text("\n".join(sentences) + "\n")
    written = bucket_main(["--train_file", str(source), "--output", str(tmp_path / "out.txt"), "--batch_size", "16",
                           "--buc_len", "fine" if buc_len is None else str(buc_len)])
    assert written.read_text().splitlines() == ordered
    assert bucketing_record(written) == {"batch_size": 16, "buc_len": "fine" if buc_len is None else str(buc_len),
                                         "seed": 42, "source": str(source)}


def test_bucketing_reads_the_lines_training_reads(tmp_path):
    """``str.splitlines()`` cut a line holding U+2028, U+0085 or a form feed in two, which training's reader keeps
    whole: the bucketed corpus held other sentences than the original, and more of them."""
    from data.corpus import load_unsup_corpus

    source = tmp_path / "in.txt"
    source.write_text("\ufeffone line\u2028with a separator\r\nform\x0cfeed\n\nnext\x85line\rlast\n",
                      encoding="utf-8")
    written = bucket_main(["--train_file", str(source), "--output", str(tmp_path / "out.txt"), "--batch_size", "2"])
    read = sorted(load_unsup_corpus(source, cache_dir=str(tmp_path / "hf"))["text"])
    assert read == ["form\x0cfeed", "last", "next\x85line", "one line\u2028with a separator"]
    assert sorted(written.read_text(encoding="utf-8").split("\n")[:-1]) == read


def test_a_bucketed_corpus_says_when_a_run_would_mix_its_buckets(tmp_path):
    """A run on a bucketed corpus under the Trainer's default random sampling, or another batch than the one the
    order was made for, trained on mixed batches without a word (``bucketing_warning``: the summary's warning; the
    run through run_unsup.py: tests/test_user_errors.py)."""
    source = tmp_path / "in.txt"
    source.write_text("".join(f"{' '.join(['w'] * (i % 9 + 1))} s{i}\n" for i in range(64)))
    written = bucket_main(["--train_file", str(source), "--output", str(tmp_path / "out.txt"), "--batch_size", "8"])
    assert bucketing_warning(written, "sequential", 8) is None and bucketing_warning(source, "random", 4) is None
    assert bucketing_warning(written, "random", 16) == (
        f"--train_file {written} is length-bucketed for batches of 8 sentences (python -m data.length_buckets, its "
        f"record {written}.buckets.json), but --train_sampling_strategy random shuffles that order away and this run "
        "takes 16 sentences a step, so each step's batch mixes buckets: pass --train_sampling_strategy sequential and "
        "a batch of 8 (per device x processes), or bucket the corpus again for this batch")
