"""Where kdagen's data files are: inside an installed wheel, or beside the package in a checkout."""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def templates_dir() -> Path:
    """templates/: shipped as kdagen/templates in a wheel; at the top of a checkout (editable installs)."""
    for candidate in (_PACKAGE / "templates", _PACKAGE.parent / "templates"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"kdagen templates not found beside {_PACKAGE}; reinstall kdagen")


def checkout_root() -> Path | None:
    """The source checkout this package runs from (None for an installed wheel): home of generated/."""
    root = _PACKAGE.parent
    return root if (root / "pyproject.toml").is_file() and (root / "templates").is_dir() else None
