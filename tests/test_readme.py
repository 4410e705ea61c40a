"""The README's Python examples that need no GPU run as written, so the README cannot rot."""
import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)
CPU_BLOCKS = [b for b in BLOCKS if "cuda" not in b]


def test_readme_has_cpu_examples():
    assert len(CPU_BLOCKS) >= 2


@pytest.mark.parametrize("block", CPU_BLOCKS, ids=[f"block{i}" for i in range(len(CPU_BLOCKS))])
def test_readme_example_runs(block, capsys):
    exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.strip()


@pytest.mark.parametrize("block", ["headline", "since", "forward", "long-context"])
def test_performance_tables_are_saved_runs(block):
    """The README's performance tables are rendered from the results files they name, figure for figure."""
    import json

    from kdagen.bench import report
    match = re.search(rf"<!-- {block}: (\S+) -->\n(.*?)\n<!-- /{block} -->", README, flags=re.S)
    assert match, f"README.md has no {block} block"
    result = json.loads((Path(__file__).resolve().parents[1] / match.group(1)).read_text())
    assert match.group(2).splitlines() == report.headline_table(result)
