"""Errors of the DSL: every message names the node (or the recurrence) and the problem."""
from __future__ import annotations


class DSLError(ValueError):
    """A malformed recurrence or a bad call on one; `.node` is the node id it is about."""

    def __init__(self, node: str | None, problem: str):
        self.node, self.problem = node, problem
        super().__init__(problem if node is None else f"node {node!r}: {problem}")


class RuleError(Exception):
    """Raised by an op's shape rule; the graph builder re-raises it as a DSLError naming the node."""
