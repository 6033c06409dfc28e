"""ESimCSE's word repetition (``--dup_type word``) reads a word's pieces from the tokenizer's own marks
(``data/word_boundaries.py``): WordPiece's ``##``, byte-level BPE's ``Ġ``, SentencePiece's ``▁``, HerBERT's and
CLIP's ``</w>``, PhoBERT's ``@@``. Before, every fast tokenizer without a WordPiece model was read as marking word
starts with ``Ġ`` / ``▁`` (a HerBERT sentence was one word, repeated whole) and every Python tokenizer as WordPiece
(a PhoBERT sentence's every sub-word was a word). Tokenizers built in code; the expected starts written by hand."""
from __future__ import annotations

import logging
import random

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import AutoModel, BertTokenizerFast, PreTrainedTokenizerFast

import run_unsup
from data.augment import LengthExtender
from data.word_boundaries import WordBoundaries, WordBoundaryError, WordMarks, word_marks
from tests.cli import in_process
from tests.tiny import FAST_TRAINING_ARGS, WORDS, tiny_config, tiny_corpus

SPECIALS = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4}
#: One sentence of three words, the first in three pieces, as each convention writes it.
PIECES = {"continuation_prefix": ["micro", "##bio", "##logy", "is", "fun"],
          "start_mark": ["micro", "bio", "logy", "Ġis", "Ġfun"],
          "end_suffix": ["micro", "bio", "logy</w>", "is</w>", "fun</w>"],
          "continuation_suffix": ["micro@@", "bio@@", "logy", "is", "fun"]}


@pytest.mark.parametrize("kind, marks", [("continuation_prefix", ("##",)), ("start_mark", ("Ġ", "▁")),
                                         ("end_suffix", ("</w>",)), ("continuation_suffix", ("@@",))])
def test_each_convention_starts_the_words_where_its_marks_say(kind, marks):
    assert WordMarks(kind, marks).starts(PIECES[kind]) == [True, False, False, True, True]
    assert WordMarks("every_token").starts(PIECES[kind]) == [True] * 5


def bpe_merges(pieces: list[list[str]]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A BPE vocabulary and the merges that build each piece (characters merged from the left; the last character of
    a word's last piece carries ``</w>``)."""
    vocab, merges = dict(SPECIALS), []
    for word in pieces:
        for index, piece in enumerate(word):
            units = list(piece[:-1]) + [piece[-1] + ("</w>" if index == len(word) - 1 else "")]
            for unit in units:
                vocab.setdefault(unit, len(vocab))
            while len(units) > 1:
                merge = (units[0], units[1])
                if merge not in merges:
                    merges.append(merge)
                units = ["".join(merge), *units[2:]]
                vocab.setdefault(units[0], len(vocab))
    return vocab, merges


def herbert_tokenizer(words: list[list[str]]):
    """HerBERT's fast tokenizer (BPE, ``end_of_word_suffix="</w>"``) over ``words``, each in the pieces given."""
    from transformers.models.herbert.tokenization_herbert import HerbertTokenizer

    vocab, merges = bpe_merges(words)
    return HerbertTokenizer(vocab=vocab, merges=merges)


def phobert_tokenizer(directory) -> PreTrainedTokenizerFast:
    """PhoBERT's Python tokenizer (fastBPE, ``@@`` on a piece a word goes on from) of a few tokens."""
    from transformers.models.phobert.tokenization_phobert import PhobertTokenizer

    (directory / "vocab.txt").write_text("".join(f"{token} 1\n" for token in ["micro@@", "bio@@", "logy", "is", "fun"]))
    (directory / "bpe.codes").write_text("m i\n")
    return PhobertTokenizer(str(directory / "vocab.txt"), str(directory / "bpe.codes"))


def fast(model, pre_tokenizer, decoder=None, framed: bool = False) -> PreTrainedTokenizerFast:
    """A fast tokenizer of ``model``; ``framed``: with ``<s> ... </s>`` around each text (as an encoder's)."""
    backend = Tokenizer(model)
    backend.pre_tokenizer = pre_tokenizer
    if decoder is not None:
        backend.decoder = decoder
    if framed:
        backend.post_processor = processors.TemplateProcessing(single="<s> $A </s>",
                                                               special_tokens=[("<s>", 0), ("</s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>")


def test_the_tokenizers_marks_are_read_from_their_models_or_their_vocabularies(tmp_path):
    pieces = BertTokenizerFast(vocab=str(_wordpiece_vocab(tmp_path)))
    assert word_marks(pieces) == WordMarks("continuation_prefix", ("##",))
    herbert = herbert_tokenizer([["micro", "bio", "logy"], ["is"], ["fun"]])
    assert word_marks(herbert) == WordMarks("end_suffix", ("</w>",))
    assert word_marks(phobert_tokenizer(tmp_path)) == WordMarks("continuation_suffix", ("@@",))
    byte_level = fast(models.BPE({**SPECIALS, "a": 5, "Ġ": 6, "Ġa": 7}, [("Ġ", "a")]),
                      pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel())
    assert word_marks(byte_level) == WordMarks("start_mark", ("Ġ", "▁"))
    unigram = fast(models.Unigram([("<unk>", 0.0), ("▁micro", -1.0), ("bio", -1.0), ("▁is", -1.0)], unk_id=0),
                   pre_tokenizers.Metaspace())
    assert word_marks(unigram) == WordMarks("start_mark", ("Ġ", "▁"))
    words = fast(models.WordLevel({**SPECIALS, "is": 5, "fun": 6}, unk_token="<unk>"), pre_tokenizers.Whitespace())
    assert word_marks(words) == WordMarks("every_token")
    unmarked = fast(models.BPE({**SPECIALS, "i": 5, "s": 6, "is": 7}, [("i", "s")], unk_token="<unk>"),
                    pre_tokenizers.Whitespace())
    with pytest.raises(WordBoundaryError, match="marks no word boundary in its vocabulary"):
        word_marks(unmarked)


def _wordpiece_vocab(directory):
    path = directory / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "micro", "##bio", "##logy", "is",
                               "fun"]) + "\n")
    return path


def test_herbert_and_phobert_words_are_their_pieces_not_the_sentence_or_each_piece(tmp_path):
    """The two tokenizers read before as marking word starts (HerBERT: the sentence was one word) and as WordPiece
    (PhoBERT: each sub-word a word)."""
    herbert = herbert_tokenizer([["micro", "bio", "logy"], ["is"], ["fun"]])
    ids = herbert("microbiology is fun", add_special_tokens=False)["input_ids"]
    assert herbert.convert_ids_to_tokens(ids) == PIECES["end_suffix"]
    assert WordBoundaries(herbert).starts(ids) == [True, False, False, True, True]
    phobert = phobert_tokenizer(tmp_path)
    ids = phobert.convert_tokens_to_ids(PIECES["continuation_suffix"])
    assert WordBoundaries(phobert).starts(ids) == [True, False, False, True, True]
    extender = LengthExtender(herbert, dup_rate=1.0, dup_type="word")
    sentence = herbert("microbiology is fun")["input_ids"]
    assert extender.units(sentence[1:-1]) == [(0, 3), (3, 4), (4, 5)]
    seen = {" ".join(herbert.convert_ids_to_tokens(extender.extend(sentence, random.Random(seed))[0][1:-1]))
            for seed in range(40)}
    assert any("micro bio logy</w> micro bio logy</w>" in view for view in seen)
    assert not any("logy</w> is</w> fun</w> micro" in view for view in seen)  # the sentence is not one word


def save_backbone_with(tokenizer, directory):
    directory.mkdir()
    AutoModel.from_config(tiny_config("bert", vocab_size=len(tokenizer))).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_word_repetition_through_run_unsup_says_how_it_reads_words_and_refuses_a_tokenizer_without_marks(
        tmp_path, capsys, caplog):
    """``run_unsup.py --method esimcse --dup_type word`` on a BERT with HerBERT's tokenizer trains, logging the
    convention it read; on one whose BPE marks nothing it stops in one line naming the flag and the way out."""
    corpus = tiny_corpus(tmp_path / "corpus.txt")
    words = [[word] if len(word) < 6 else [word[:3], word[3:]] for word in dict.fromkeys(WORDS)]
    herbert = save_backbone_with(herbert_tokenizer(words), tmp_path / "herbert")

    def run(backbone, name: str):
        return in_process(run_unsup.main, [
            "--method", "esimcse", "--dup_type", "word", "--model_name_or_path", str(backbone), "--train_file",
            str(corpus), "--max_steps", "1", "--eval_strategy", "no", "--output_dir", str(tmp_path / name),
            *FAST_TRAINING_ARGS], capsys)

    with caplog.at_level(logging.INFO, logger="trainers.methods"):
        trained = run(herbert, "herbert")
    assert trained.code == 0, trained.err
    assert ("--dup_type word: HerbertTokenizer's words as its vocabulary marks them (a token ending in '</w>' ends a "
            "word)") in [record.getMessage() for record in caplog.records]
    vocab = {**SPECIALS, **{word: index for index, word in enumerate(dict.fromkeys(WORDS), start=len(SPECIALS))}}
    unmarked = fast(models.BPE(vocab, [], unk_token="<unk>"), pre_tokenizers.Whitespace(), framed=True)
    unmarked.add_special_tokens({"cls_token": "<s>", "sep_token": "</s>", "mask_token": "<mask>"})
    refused = run(save_backbone_with(unmarked, tmp_path / "unmarked"), "unmarked")
    assert refused.code == 2
    assert refused.err.strip().splitlines()[-1] == (
        f"run_unsup.py: error: --dup_type word with the tokenizer of {tmp_path / 'unmarked'}: TokenizersBackend "
        "marks no word boundary in its vocabulary (none of its tokens starts with '##', 'Ġ' or '▁' or ends with "
        "'</w>' or '@@'), so its words cannot be told from its tokens. Repeat sub-words instead (--dup_type subword, "
        "the paper's default)")
