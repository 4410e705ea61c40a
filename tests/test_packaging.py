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


def _declared() -> dict:
    """{distribution: minimum version} from pyproject.toml's dependencies and test extra."""
    import re
    import tomllib
    project = tomllib.loads((CHECKOUT_TEMPLATES.parent / "pyproject.toml").read_text())["project"]
    found = {}
    for spec in project["dependencies"] + project["optional-dependencies"]["test"]:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", spec)
        assert m, f"{spec}: declare dependencies as name>=version"
        found[m.group(1)] = m.group(2)
    return found


def test_installed_versions_meet_the_declared_bounds():
    """The environment the suite runs in satisfies the bounds pyproject declares (CI installs from them)."""
    from importlib.metadata import version

    def parts(v: str) -> tuple:
        return tuple(int(x) for x in v.split("+")[0].split(".")[:3] if x.isdigit())
    for name, minimum in _declared().items():
        assert parts(version(name)) >= parts(minimum), f"{name} {version(name)} is below the declared {minimum}"


def test_license_is_declared_and_shipped():
    import tomllib
    root = CHECKOUT_TEMPLATES.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and "MIT License" in (root / "LICENSE").read_text()
