"""Benchmarks: each module prints its figures next to a reference run in the same process/run."""
