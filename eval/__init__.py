"""SentEval-compatible evaluation of sentence encoders (our own implementation; SentEval is not on PyPI).

Modules:

- :mod:`eval.encoder`  -- :class:`~eval.encoder.SentenceEncoder`: batched, deduplicated, length-sorted encoding.
- :mod:`eval.loading`  -- :func:`~eval.loading.load_encoder`: this repo's checkpoints, sentence-transformers
  folders and plain Hugging Face models behind one interface.
- :mod:`eval.sts`      -- STS12-16 / STS-B / SICK-R loaders and the unsupervised cosine-Spearman protocol of
  SimCSE (Gao et al., 2021, Appendix B), "all" aggregation.
- :mod:`eval.transfer` -- SentEval's transfer tasks (MR, CR, SUBJ, MPQA, SST-2, TREC, MRPC) with
  :mod:`eval.classifier`, SentEval's logistic-regression protocol on CPU or GPU.
- :mod:`eval.analysis` -- alignment/uniformity, retrieval, cosine distributions, length bias, nearest neighbours;
  :mod:`eval.plots` draws them.
- :mod:`eval.results`  -- the papers' numbers beside ours as Markdown (``python -m eval.results``), over seeds
  with :mod:`eval.stats` (mean, sample std, 95% t-interval), and the stand-in runs' figures; into
  ``outputs/report`` unless ``--update_docs``, where :mod:`eval.figure_record` refuses figures that lose runs.
- :mod:`eval.mteb_suite` -- ``python -m eval --suite mteb``: MTEB's English STS tasks through mteb's evaluator
  (optional ``mteb``; offline, built from the SentEval files).
- :mod:`eval.curves`   -- a training run's curves from its log history (loss, method terms, STS-B dev, best step).
- :mod:`eval.released` -- the authors' released checkpoints beside their published numbers
  (``python -m eval.released``, ``scripts/check_released.sh``).
- :mod:`eval.cli`      -- ``python -m eval ...``.

Submodules are not imported here so that ``import eval.sts`` stays light (no torch import).
"""
