"""Launch sizes: the symbols a plan's grids and workspace shapes use, and their evaluation.

Symbols: N (sequences), HV (value heads), H (q/k heads), chunks (an upper bound on the chunks of
all sequences: T // C + N, so no host sync is needed to size the grid), T (tokens of the packed row).
"""
from __future__ import annotations

import ast
import functools

SYMBOLS = ("N", "HV", "H", "chunks", "T")
_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)


def launch_sizes(*, B: int, T: int, H: int, HV: int, chunk: int, num_seqs: int | None = None) -> dict:
    """Sizes for a batch of B rows of T tokens, or (num_seqs given) B = 1 packed sequences."""
    N = B if num_seqs is None else num_seqs
    total = B * T
    return {"N": N, "HV": HV, "H": H, "T": total, "chunks": total // chunk + N}


def evaluate(expr, sizes: dict) -> int:
    """An int, or an expression over SYMBOLS with + - * // and integers."""
    if isinstance(expr, int):
        return expr
    code, names = _compile(str(expr))
    unknown = [n for n in names if n not in sizes]
    if unknown:
        raise KeyError(f"size expression {expr!r}: unknown symbol {unknown[0]!r} (known: {sorted(sizes)})")
    return eval(code, {"__builtins__": {}}, sizes)


@functools.lru_cache(maxsize=None)
def _compile(text: str):
    """(code, symbols) of a checked expression: a plan has a handful, evaluated at every launch, so each
    is parsed and checked once."""
    tree = ast.parse(text, mode="eval")
    names = []
    for node in ast.walk(tree.body):
        if isinstance(node, ast.Name):
            names.append(node.id)
        elif not (isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool)
                  or isinstance(node, ast.BinOp) and type(node.op) in _OPS
                  or isinstance(node, (ast.Load, *_OPS))):
            raise ValueError(f"size expression {text!r}: only integers, symbols and + - * // are allowed")
    return compile(tree, "<size>", "eval"), tuple(dict.fromkeys(names))
