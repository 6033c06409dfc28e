"""Benchmarks: ``python -m bench.train_throughput`` times training steps of every method against
sentence-transformers' MultipleNegativesRankingLoss recipe (docs/benchmarks.md)."""
