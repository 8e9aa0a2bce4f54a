"""Probes: what a model or a method does (zero-shot validity, first moves, estimators side by side, grids of
runs, a long run's health), measured and written to ``benchmarks/results/``."""
