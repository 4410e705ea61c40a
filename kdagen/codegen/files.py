"""Writing emitted configurations to disk: generated/<uri>/{forward.cu, backward.cu, plan.json}.

Files are written only when their content changes, so timestamps (and build tools watching them)
stay quiet when nothing changed.
"""
from __future__ import annotations

from pathlib import Path

from ..plan.model import Plan
from .render import render


def write_if_different(path: Path, text: str) -> bool:
    """Write text to path unless it already holds exactly that; True when written."""
    path = Path(path)
    if path.is_file() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return True


def emitted_files(plan: Plan, recurrence, directions) -> dict:
    """{relative path: text} of one configuration's directory."""
    files = {f"{plan.uri}/{name}": text for name, text in render(plan, recurrence, directions).items()}
    files[f"{plan.uri}/plan.json"] = plan.to_json()
    return files


def emit(root: Path, plan: Plan, recurrence, directions) -> list[Path]:
    """Write the configuration under root; returns the paths that changed."""
    changed = []
    for rel, text in emitted_files(plan, recurrence, directions).items():
        if write_if_different(Path(root) / rel, text):
            changed.append(Path(root) / rel)
    return changed
