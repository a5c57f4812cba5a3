"""Benchmarks: numbers to compare (ratios in one run), never pass/fail tests."""
