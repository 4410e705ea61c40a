"""Launch sizes: the symbols a plan's grids and workspace shapes use, and their evaluation.

Symbols: N (sequences), HV (value heads), H (q/k heads), chunks (an upper bound on the chunks of
all sequences: T // C + N, so no host sync is needed to size the grid), T (tokens of the packed row).
"""
from __future__ import annotations

import ast
import operator

SYMBOLS = ("N", "HV", "H", "chunks", "T")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def launch_sizes(*, B: int, T: int, H: int, HV: int, chunk: int, num_seqs: int | None = None) -> dict:
    """Sizes for a batch of B rows of T tokens, or (num_seqs given) B = 1 packed sequences."""
    N = B if num_seqs is None else num_seqs
    total = B * T
    return {"N": N, "HV": HV, "H": H, "T": total, "chunks": total // chunk + N}


def evaluate(expr, sizes: dict) -> int:
    """An int, or an expression over SYMBOLS with + - * // and integers."""
    if isinstance(expr, int):
        return expr

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in sizes:
                raise KeyError(f"size expression {expr!r}: unknown symbol {node.id!r} (known: {sorted(sizes)})")
            return sizes[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(f"size expression {expr!r}: only integers, symbols and + - * // are allowed")

    return ev(ast.parse(str(expr), mode="eval"))

