"""generated/ holds the default configurations exactly as kdagen renders them now.

generated/ is found beside this file, not through the package: CI tests an installed (non-editable) kdagen,
whose templates are the checkout's (tests/test_packaging.py), against the checkout's generated/."""
from __future__ import annotations

from pathlib import Path

from kdagen.codegen import direction_available, emitted_files
from kdagen.plan import default_plans

ROOT = Path(__file__).resolve().parents[1]


def test_generated_is_up_to_date():
    expected = {}
    for plan, recurrence in default_plans():
        directions = [d for d in plan.directions() if direction_available(plan, d)]
        assert directions == plan.directions(), f"{plan.uri}: templates missing for {set(plan.directions()) - set(directions)}"
        expected.update(emitted_files(plan, recurrence, directions))
    root = ROOT / "generated"
    present = {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file() and p.name != "README.md"}
    stale = sorted(f for f, text in expected.items() if present.get(f) != text)
    extra = sorted(set(present) - set(expected))
    assert not stale and not extra, (f"generated/ is stale (changed or missing: {stale}; no longer produced: {extra}); "
                                     "run `kdagen emit --defaults`")
