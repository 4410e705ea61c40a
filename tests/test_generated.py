"""generated/ holds the default configurations exactly as kdagen renders them now.

generated/ is found beside this file, not through the package: CI tests an installed (non-editable) kdagen,
whose templates are the checkout's (tests/test_packaging.py), against the checkout's generated/."""
from __future__ import annotations

from pathlib import Path

from kdagen.codegen import DIRECTIONS, direction_available, emitted_files
from kdagen.plan import default_problems, make_plan, verify

ROOT = Path(__file__).resolve().parents[1]


def test_generated_is_up_to_date():
    expected = {}
    for problem in default_problems():
        plan = verify(make_plan(problem))
        directions = [d for d in DIRECTIONS if direction_available(plan, d)]
        assert directions == list(DIRECTIONS), f"{plan.uri}: templates missing for {set(DIRECTIONS) - set(directions)}"
        expected.update(emitted_files(plan, problem.recurrence, directions))
    root = ROOT / "generated"
    present = {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file() and p.name != "README.md"}
    stale = sorted(f for f, text in expected.items() if present.get(f) != text)
    extra = sorted(set(present) - set(expected))
    assert not stale and not extra, (f"generated/ is stale (changed or missing: {stale}; no longer produced: {extra}); "
                                     "run `kdagen emit --defaults`")
