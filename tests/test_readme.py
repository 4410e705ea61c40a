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


def test_the_performance_table_is_a_saved_run():
    """The README's performance table is rendered from the results file it names, figure for figure."""
    import json

    from kdagen.bench import report
    match = re.search(r"<!-- headline: (\S+) -->\n(.*?)\n<!-- /headline -->", README, flags=re.S)
    assert match, "README.md has no headline block"
    result = json.loads((Path(__file__).resolve().parents[1] / match.group(1)).read_text())
    assert match.group(2).splitlines() == report.headline_table(result)
