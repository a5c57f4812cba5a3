"""`talb bench --preset NAME` and free sweeps: many `talb run`s, their
statistics, plots like the paper's figures and a summary (docs/experiments.md).

plan.py (presets -> runs), runner.py (fabric reuse, clean state, resume,
progress), stats.py (means, 95% t intervals, paired comparisons), plots.py, summary.py.
"""
