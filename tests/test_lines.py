"""`#line` directives: a rendered unit's lines point back at the template (or header) line that produced
them, so compiler errors and profiler source views name the template, not the generated file."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from kdagen.codegen import lines, render_unit
from kdagen.paths import templates_dir
from kdagen.plan import default_problem, make_plan


def origins(text: str) -> list[tuple[str, int, str]]:
    """(file, line, text) of every non-directive line, as a C preprocessor counts them."""
    out, where = [], ("<unit>", 1)
    for line in text.split("\n"):
        m = re.fullmatch(r'#line (\d+) "([^"]+)"', line)
        if m:
            where = (m.group(2), int(m.group(1)))
            continue
        out.append((*where, line))
        where = (where[0], where[1] + 1)
    return out


def test_markers_skip_tags_and_statements():
    src = 'a{{ x }}\n{% if y %}\nb {{ f(1,\n 2) }} c\n  {# note #}\ne\n'
    marked = lines.mark_template(src, "t.j2")
    assert marked.split("\n")[0].startswith(lines.marker("t.j2", 1))
    assert marked.split("\n")[1] == "{% if y %}"                       # a statement line stays as it is
    assert marked.split("\n")[3] == " 2) }} c"                          # inside a tag: no marker
    assert marked.split("\n")[5].startswith(lines.marker("t.j2", 6))
    resolved = lines.resolve(lines.marker("t.j2", 3) + "x\n" + lines.marker("t.j2", 4) + "y\nz\n", "unit.cu")
    assert resolved.split("\n") == ['#line 3 "t.j2"', "x", "y", '#line 5 "unit.cu"', "z", ""]


@pytest.fixture(scope="module", params=[("kda", ("forward", "backward")), ("gdn", ("forward",))])
def unit(request):
    op, directions = request.param
    problem = default_problem(op)
    plan = make_plan(problem, directions=directions)
    return plan, render_unit(plan, problem.recurrence, "forward")


def test_every_template_line_points_home(unit):
    """Each line attributed to a template or header holds that file's text at that line (less indentation
    and the Jinja expressions, which render to other text)."""
    plan, text = unit
    checked = 0
    for path, no, line in origins(text):
        if not path.startswith("templates/") or "{{" in line or not line.strip():
            continue
        source = (templates_dir() / path.removeprefix("templates/")).read_text().split("\n")[no - 1]
        if "{{" in source or "{%" in source:
            continue
        assert line.strip() == source.strip(), f"{path}:{no}: rendered {line.strip()!r}, file {source.strip()!r}"
        checked += 1
    assert checked > 500


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_compiler_error_names_the_template_line(unit, tmp_path):
    plan, text = unit
    rows = text.split("\n")
    at = next(i for i, (p, n, line) in enumerate(origins(text)) if p.endswith("recurrence.cu.j2") and "num_chunks =" in line)
    path, no, _ = origins(text)[at]
    physical = [i for i, r in enumerate(rows) if not r.startswith("#line ")][at]
    rows.insert(physical + 1, "#error kdagen-line-check")
    src = tmp_path / "unit.cu"
    src.write_text("\n".join(rows))
    res = subprocess.run(["nvcc", "-cubin", "-arch=sm_90a", str(src), "-o", str(tmp_path / "u.cubin")],
                         capture_output=True, text=True)
    assert res.returncode != 0 and re.search(rf"{re.escape(path)}[:(]{no + 1}\b", res.stderr), res.stderr[-2000:]
