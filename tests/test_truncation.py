"""The count of training sentences ``--max_seq_length`` cuts (data/truncation.py), against a written-out count of
the tiny word-level tokenizer's tokens (one per word, plus [CLS] and [SEP] where the collator adds them), and through
run_unsup.py: the log, the summary's ``truncation:`` line and ``all_results.json``."""
from __future__ import annotations

import json

import datasets
import pytest

import run_unsup
from data.collators import ContrastiveCollator
from data.prompt_templates import PromptCollator, tokenize_template
from data.truncation import count_cut_sentences
from tests.cli import in_process
from tests.tiny import FAST_TRAINING_ARGS, tiny_corpus, tiny_tokenizer

SENTENCES = ["the cat", "the cat sits", "a dog runs in the park", "the big red car", "music", "the old man reads a book"]


@pytest.fixture
def tokenizer(tmp_path):
    return tiny_tokenizer(tmp_path / "tokenizer")


def words(text: str) -> int:
    return len(text.split())


def test_the_contrastive_collator_counts_sentences_longer_than_max_length_with_its_special_tokens(tokenizer):
    collator = ContrastiveCollator(tokenizer, max_length=5, view_columns=("sent0", "sent1"))
    rows = datasets.Dataset.from_dict({"sent0": SENTENCES, "sent1": SENTENCES[::-1], "other": SENTENCES})
    cut = count_cut_sentences(collator, rows)
    expected = sum(words(text) + 2 > 5 for text in SENTENCES) * 2  # [CLS] ... [SEP], both columns, not "other"
    assert (cut.cut, cut.sentences, cut.rows, cut.corpus_rows) == (expected, 12, 6, 6) and expected == 6
    assert cut.describe() == ("6 of 12 sentences (50.0 %) are longer than --max_seq_length 5 tokens and are cut to "
                              "it")
    for batch in collator.tokenize(SENTENCES):  # what the count stands for: the collator's own cut
        assert len(batch) <= 5


def test_promptberts_collator_counts_the_sentences_own_tokens(tokenizer):
    template = tokenize_template("*cls*_the_*sent_0*_is*mask*.*sep+*", tokenizer)
    collator = PromptCollator(tokenizer, [template, template], max_length=3)
    cut = count_cut_sentences(collator, datasets.Dataset.from_dict({"text": SENTENCES}))
    assert (cut.cut, cut.sentences) == (sum(words(text) > 3 for text in SENTENCES), 6) == (3, 6)


def test_a_large_corpus_is_counted_on_evenly_spaced_rows(tokenizer):
    texts = [" ".join(["cat"] * (index % 7 + 1)) for index in range(25)]
    collator = ContrastiveCollator(tokenizer, max_length=5)
    cut = count_cut_sentences(collator, datasets.Dataset.from_dict({"text": texts}), counted_rows=10)
    counted = texts[::3]  # a stride of ceil(25 / 10) = 3: rows 0, 3, ..., 24
    assert (cut.rows, cut.sentences, cut.cut) == (9, 9, sum(words(text) + 2 > 5 for text in counted))
    assert cut.describe().endswith("(counted on 9 evenly spaced rows of 25)")
    assert count_cut_sentences(collator, datasets.Dataset.from_dict({"other": texts})) is None


def test_the_count_keeps_one_token_past_the_limit_of_a_long_line(tokenizer):
    """A corpus of documents (a line of many thousand words) is counted without keeping all their tokens: each is
    tokenised to one token past the limit, enough to tell a cut."""
    document = " ".join(["cat"] * 20_000)
    collator = ContrastiveCollator(tokenizer, max_length=5)
    rows = datasets.Dataset.from_dict({"text": [document, "the cat", "a b c d", "the big red car"]})
    assert count_cut_sentences(collator, rows).cut == 3  # the document, and twice 4 words + [CLS] + [SEP] = 6 > 5
    template = tokenize_template("*cls*_*sent_0*_is*mask*.*sep+*", tokenizer)
    assert count_cut_sentences(PromptCollator(tokenizer, [template], max_length=4), rows).cut == 1  # the document


def test_the_run_says_how_many_sentences_max_seq_length_cuts(tmp_path, backbone, capsys, caplog):
    """The collator cut every sentence past --max_seq_length without a word; the log, the summary and
    all_results.json now count them (a corpus of long lines under the papers' 32 tokens loses most of its text)."""
    corpus = tiny_corpus(tmp_path / "corpus.txt", n=40)
    lines = corpus.read_text().splitlines()
    expected = sum(words(line) + 2 > 8 for line in lines)
    assert 0 < expected < len(lines)
    out = tmp_path / "run"
    with caplog.at_level("INFO", logger="cse_repro"):
        result = in_process(run_unsup.main, [
            "--method", "simcse", "--model_name_or_path", str(backbone), "--train_file", str(corpus), "--max_steps",
            "1", "--eval_strategy", "no", "--max_seq_length", "8", "--output_dir", str(out), *FAST_TRAINING_ARGS],
            capsys)
    assert result.code == 0, result.err
    said = (f"{expected} of 40 sentences ({100 * expected / 40:.1f} %) are longer than --max_seq_length 8 tokens and "
            "are cut to it")
    assert f"truncation: {said}" in result.out.split("run summary ===", 1)[1]
    assert said in caplog.text
    results = json.loads((out / "all_results.json").read_text())
    assert (results["cut_sentences"], results["counted_sentences"]) == (expected, 40)


def test_diffcse_insert_edit_counts_the_copies_it_shortens(tmp_path, tokenizer, capsys):
    """``--rtd_edit insert`` drops a sentence's last body tokens until it and its round(0.3 n) [MASK] tokens fit in
    --max_seq_length: most of a corpus of long sentences lost its tail in the edited copy without a word (the count
    covered the SimCSE views alone). Counted against the written-out rule, and through run_diffcse.py's summary."""
    import run_diffcse
    from data.diffcse_collator import DiffCSECollator
    from tests.tiny import save_tiny_backbone, save_tiny_generator

    def shortened(text: str, max_length: int) -> bool:
        n = min(words(text), max_length - 2)  # the view's body, [CLS] and [SEP] aside
        return n + 2 + max(1, round(0.3 * n)) > max_length

    collator = DiffCSECollator(tokenizer, max_length=6, masking_ratio=0.3, edit="insert")
    cut = count_cut_sentences(collator, datasets.Dataset.from_dict({"text": SENTENCES}))
    expected = sum(shortened(text, 6) for text in SENTENCES)
    assert (cut.cut, cut.edit_cut, expected) == (2, expected, 3)  # the two of 6 words, cut to 4, and 4 words
    assert cut.describe() == ("2 of 6 sentences (33.3 %) are longer than --max_seq_length 6 tokens and are cut to it; "
                              "the edited copies of 3 (50.0 %) lose their last tokens to make room for --rtd_edit "
                              "insert's [MASK] tokens within --max_seq_length 6")
    assert count_cut_sentences(DiffCSECollator(tokenizer, max_length=6, masking_ratio=0.3),
                               datasets.Dataset.from_dict({"text": SENTENCES})).edit_cut == 0  # replace: none
    corpus = tiny_corpus(tmp_path / "corpus.txt", n=40)
    lines = corpus.read_text().splitlines()
    out = tmp_path / "run"
    result = in_process(run_diffcse.main, [
        "--model_name_or_path", str(save_tiny_backbone(tmp_path / "encoder")), "--generator_name",
        str(save_tiny_generator(tmp_path / "generator")), "--rtd_edit", "insert", "--train_file", str(corpus),
        "--max_steps", "1", "--eval_strategy", "no", "--max_seq_length", "10", "--output_dir", str(out),
        *FAST_TRAINING_ARGS], capsys, prog="run_diffcse.py")
    assert result.code == 0, result.err
    edited = sum(shortened(line, 10) for line in lines)
    assert 0 < edited < len(lines)
    assert (f"the edited copies of {edited} ({100 * edited / 40:.1f} %) lose their last tokens to make room for "
            "--rtd_edit insert's [MASK] tokens within --max_seq_length 10") in result.out.split("run summary ===", 1)[1]
    assert json.loads((out / "all_results.json").read_text())["edit_cut_sentences"] == edited
