"""Communication patterns of data-parallel training: one module per pattern.

A pattern module provides ``ROLES``, ``nodes(plan)`` (the processes it runs:
(role, rank) in node-id order), ``run(plan, role, rank)`` (one process's
part, started in a host namespace by ``python -m workload.patterns.node``)
and ``bytes_per_iteration(...)`` (the arithmetic its traffic must meet).
Add a pattern by adding a module and a line here.
"""
from __future__ import annotations

import importlib

from common.excerpt import shown

PATTERNS = {"ps": "workload.patterns.ps", "allreduce": "workload.patterns.allreduce"}


def get_pattern(name: str):
    if name not in PATTERNS:
        raise ValueError(f"arch: one of {', '.join(PATTERNS)}, got {shown(name)}")
    return importlib.import_module(PATTERNS[name])
