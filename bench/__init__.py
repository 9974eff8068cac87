"""Benchmarks (`make bench`); results and method in BENCHMARKS.md."""
