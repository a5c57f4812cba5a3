"""The two ways a topology can fail: a bad spec, or a build that went wrong."""
from __future__ import annotations

from common.excerpt import EXCERPT, WHOLE


class TopologyError(ValueError):
    """A topology spec is invalid; ``field`` says where, as written in the YAML
    (a field named by a key of the file that is longer than a name: cut, as
    common/excerpt.py cuts a value)."""

    def __init__(self, field: str, problem: str):
        if len(field) > WHOLE:
            field = field[:EXCERPT] + "…"
        self.field, self.problem = field, problem
        super().__init__(f"{field}: {problem}" if field else problem)

    def within(self, outer: str) -> "TopologyError":
        """The same error seen from an enclosing field (``rate`` -> ``links[1].rate``)."""
        field = f"{outer}.{self.field}" if self.field else outer
        return TopologyError(field, self.problem)


class BuildError(RuntimeError):
    """Building failed at ``step`` on ``node``; whatever was built is gone again."""

    def __init__(self, step: str, node: str | None, cause: str):
        self.step, self.node, self.cause = step, node, cause
        where = f"step '{step}'" + (f", node '{node}'" if node else "")
        super().__init__(f"build failed at {where}: {cause}")
