"""`talb bench --preset NAME` and free sweeps: many `talb run`s, their
statistics, plots like the paper's figures and a summary (docs/experiments.md).

plan.py (presets -> runs), kinds.py (a sweep's kind: its plan and report,
training or lb-classic's background only), lbclassic.py (the lb-classic
calibration), runner.py (fabric reuse, clean state, resume, progress),
layout.py (where each run's results go), seeds.py (the seed rule),
pairing.py (did a seed's runs see the same background), results.py (rows
and points), stats.py (means, 95% t intervals, paired comparisons),
plots.py, summary.py.
"""
