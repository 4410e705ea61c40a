"""The installed package carries every template (CI installs with `pip install .`, not editable)."""
from pathlib import Path

from kdagen.paths import templates_dir

CHECKOUT_TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_installed_package_ships_all_templates():
    shipped = _files(templates_dir())
    assert "README.md" in shipped
    assert _files(CHECKOUT_TEMPLATES) <= shipped
