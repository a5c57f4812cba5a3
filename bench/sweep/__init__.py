"""`talb bench --preset NAME` and free sweeps: many `talb run`s, their
statistics, plots like the paper's figures and a summary (docs/experiments.md).

plan.py (presets -> runs), runner.py (fabric reuse, clean state, resume,
progress), stats.py (mean, 95% t interval), plots.py, summary.py.
"""
