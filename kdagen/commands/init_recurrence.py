"""`kdagen init-recurrence NAME`: a starting point for a recurrence of your own — NAME.py with a gate, a head
parameter and a β map written in kdagen.dsl, and test_NAME.py, which runs its compiled op forward and backward
against kdagen's float64 interpreter (on a GPU, or on the CPU through the emulator). Edit NAME.py, run
`pytest test_NAME.py`, look at the kernels with `kdagen plan --recurrence NAME.py:NAME`, and call it with
`kdagen.compile(NAME)`. docs/recurrences.md explains what the DSL can express."""
from __future__ import annotations

import sys
from pathlib import Path

EXAMPLE = """examples:
  kdagen init-recurrence my_gate               # writes my_gate.py and test_my_gate.py here
  kdagen init-recurrence my_gate -o src/       # ... under src/
  pytest -q test_my_gate.py
  kdagen plan --recurrence my_gate.py:my_gate --head-dim 64"""

RECURRENCE = '''"""{name}: a chunked delta-rule recurrence for kdagen (started by `kdagen init-recurrence {name}`).

Edit the gate and the β map, then check it with `pytest test_{name}.py` and look at its kernels with
`kdagen plan --recurrence {name}.py:{name}`. Use it as an op: `op = kdagen.compile({name})`, then
`o, final_state = op(q, k, v, g, beta, w, initial_state=h0, output_final_state=True)`.
"""
from kdagen import dsl


def {name}(r: dsl.Recurrence, lower_bound: float = -5.0) -> None:
    # per token (q, k on the q/k heads; the rest on the value heads): [B, T, heads, K] or [B, T, heads]
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    g, beta = r.token_input("g", "K"), r.token_input("beta")
    # per value head, learned: [HV, K] (or [HV * K])
    w = r.head_param("w", "K")
    # the per-step log decay must be provably <= 0; this one lies in [lower_bound, 0]
    decay = lower_bound * dsl.sigmoid(g * dsl.exp(w))
    r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v, beta=dsl.sigmoid(beta), decay=decay,
                 scale=r.scalar("scale"))
'''

TEST = '''"""{name}'s op against kdagen's float64 interpreter, forward and backward (started by `kdagen init-recurrence`).

On a GPU the generated kernels run there; without one, on the CPU through kdagen's emulator (slow: keep the
shapes small)."""
import torch

import kdagen
from kdagen import testing
from {name} import {name}


def test_{name}_matches_the_interpreter():
    op = kdagen.compile({name}, emulate=not torch.cuda.is_available())
    errors = testing.compare(op, seed=0, B=1, T=40, H=2, head_dim=64)
    over = [n for n, e in errors.items() if not e <= testing.bound(op, n)]
    assert not over, f"{{over}} over their bounds:\\n" + testing.report(op, errors)
'''


def files(name: str) -> dict[str, str]:
    """{file name: text} of the starter for a recurrence called `name`."""
    return {f"{name}.py": RECURRENCE.format(name=name), f"test_{name}.py": TEST.format(name=name)}


def run(args) -> int:
    name = args.name
    if not name.isidentifier() or not name.replace("_", "").isalnum():
        print(f"kdagen init-recurrence: NAME {name!r} must be a Python identifier of letters, digits and '_'",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = files(name)
    existing = [f for f in written if (out / f).exists()]
    if existing and not args.force:
        print(f"kdagen init-recurrence: {', '.join(str(out / f) for f in existing)} exist; --force overwrites",
              file=sys.stderr)
        return 1
    for file, text in written.items():
        (out / file).write_text(text)
        print(f"wrote {out / file}")
    return 0


def register(subparsers) -> None:
    import argparse
    p = subparsers.add_parser("init-recurrence", help="start a recurrence of your own: NAME.py and test_NAME.py",
                              description=__doc__, epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", metavar="NAME", help="the recurrence's function and file name (an identifier)")
    p.add_argument("-o", "--out", default=".", help="directory to write into (default: here)")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    p.set_defaults(func=run)
