"""The paper's experiments, run on the live testbed through the workload:
sweep/ (`talb bench --preset NAME` and free sweeps: plans, runner,
statistics, plots, summaries) and faults.py (`talb bench faults`: the
fault-recovery matrix). Results formats: docs/experiments.md,
docs/faults.md. The micro-benchmarks are bench/'s.
"""
