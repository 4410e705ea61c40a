"""The report of `kdagen bench` from a hand-made result set: tables, ratios, footnotes, comparisons, PNG."""
import copy

import pytest

from kdagen.bench import plot, report

REFUSAL = "refused by FLA: RuntimeError: Triton >= 3.4.0 and < 3.7.1 on Hopper GPUs produces incorrect results"


def ok(ms, floor, spread=0.02, repeats=(None, None)):
    medians = [ms if r is None else r for r in repeats]
    rel = (max(medians) - min(medians)) / (sum(medians) / len(medians))
    return {"status": "ok", "ms": ms, "spread": spread, "floor_share": floor / ms,
            "repeats": [{"median": m, "spread": spread} for m in medians],
            "repeat_agreement": {"rel_diff": rel, "allowed": spread, "agree": rel <= spread}}


def case(op, label, mode, shape_name, floor, kdagen, fla):
    return {"op": op, "label": label, "mode": mode, "shape_name": shape_name, "shape": {},
            "work": {"floor_ms": floor}, "results": {"kdagen": kdagen, "fla": fla}}


def fake_result():
    return {
        "schema": 1, "complete": True, "timer": "CUDA events on the current stream, L2 flushed before each call",
        "env": {"date": "2026-01-02", "device": "NVIDIA H200", "torch": "2.9.0", "cuda": "12.8", "triton": "3.6.0",
                "python": "3.12.3", "versions": {"kdagen": "0.1.0", "fla": "0.6.0"}},
        "settings": {"iters": 20, "warmup": 3, "input_sets": 3, "repeats": 2, "chunk": 64},
        "ceilings": [{"copy": {"bytes_per_s": 4.1e12, "spread": 0.003},
                      "matmul": {"flops_per_s": 7.0e14, "spread": 0.01}}],
        "cases": [
            case("kda", "chunk_kda, softplus gate", "fwd", "1x8192x64x128", 0.5, ok(1.0, 0.5), ok(2.5, 0.5)),
            case("gdn", "chunk_gated_delta_rule", "bwd", "1x8192x64x128", 0.6, ok(3.0, 0.6),
                 {"status": "error", "reason": REFUSAL}),
            case("kda", "chunk_kda, softplus gate", "bwd", "1300+547x64x128", 0.4,
                 ok(2.0, 0.4, repeats=(1.9, 2.1)), {"status": "n/a", "reason": "not requested (--libs kdagen)"}),
        ],
        "accuracy": [{"op": "gdn", "label": "chunk_gated_delta_rule", "shape_name": "1x1500x2x128", "results": {
            "kdagen": {"errors": {"o": 1.5e-3, "ht": 2e-4, "q": 3e-3, "initial_state": float("nan")}, "note": None},
            "fla": {"errors": {"o": 2.5e-3, "ht": 3e-4}, "note": f"backward {REFUSAL}"}}}],
    }


def rows(md, first_cell):
    return [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()
            if line.startswith(f"| {first_cell}")]


def section(md, title):
    """The markdown from the heading `title` to the next heading."""
    start = md.index(f"### {title}")
    end = md.find("### ", start + 4)
    return md[start:] if end < 0 else md[start:end]


def test_headline_table_one_row_per_op_and_shape():
    summary = section(report.markdown(fake_result()), "Summary")
    assert rows(summary, "op")[0] == ["op", "shape", "fwd: kdagen / FLA ms", "bwd: kdagen / FLA ms"]
    assert rows(summary, "chunk_") == [
        ["chunk_kda, softplus gate", "1x8192x64x128", "1.00 / 2.50 (2.50×)", "—"],
        ["chunk_gated_delta_rule", "1x8192x64x128", "—", "3.00 / n/a"],
        ["chunk_kda, softplus gate", "1300+547x64x128", "—", "2.00 / n/a"]]


def test_timing_table_ratio_floor_share_and_footnotes():
    md = report.markdown(fake_result())
    timings = section(md, "Timings")
    header, first, refused, partial = rows(timings, "op")[0], *rows(timings, "chunk_")[:3]
    assert header == ["op", "mode", "shape", "kdagen ms", "FLA ms", "FLA / kdagen", "kdagen % of floor",
                      "FLA % of floor", "floor ms"]
    assert first == ["chunk_kda, softplus gate", "fwd", "1x8192x64x128", "1.000 (2.0%)", "2.500 (2.0%)", "2.50×",
                     "50.0%", "20.0%", "0.500"]
    assert refused[3:8] == ["3.000 (2.0%)", "n/a [1]", "n/a", "20.0%", "n/a"]
    assert partial[3:5] == ["2.000 (2.0%) ⚠", "n/a [2]"]
    assert f"1. {REFUSAL}" in md and "2. not requested (--libs kdagen)" in md
    assert "NVIDIA H200" in md and "FLA 0.6.0" in md and "Triton 3.6.0" in md
    assert "device copy 4.100 TB/s (spread 0.3%), bf16 matmul 700.0 TFLOP/s (spread 1.0%)" in md
    assert "Partial run" not in md


def test_repeat_agreement_is_printed_and_flags_the_cell_beyond_its_spread():
    md = report.markdown(fake_result())
    assert ("Repeat agreement: 3/4 cells agree within their spread (largest difference between repeats 10.0% "
            "of the median, kdagen kda bwd 1300+547x64x128, spread 2.0%).") in md
    assert "- ⚠ kdagen kda bwd 1300+547x64x128: repeats differ by 10.0% > spread 2.0%" in md


def test_accuracy_rows_side_by_side():
    md = report.markdown(fake_result())
    kd, fla = (r for r in rows(md, "chunk_gated_delta_rule") if r[1] == "1x1500x2x128")
    assert kd[2:] == ["kdagen", "1.50e-03", "2.00e-04", "3.00e-03", "—", "—", "—", "—", "—", "—", "nan", ""]
    assert fla[2:5] == ["FLA", "2.50e-03", "3.00e-04"] and fla[5] == "—" and fla[-1] == "[3]"
    assert f"3. backward {REFUSAL}" in md


def test_partial_run_is_marked():
    r = fake_result()
    r["complete"] = False
    assert "**Partial run**" in report.markdown(r)


def test_compare_two_runs():
    a, b = fake_result(), fake_result()
    b["cases"][0]["results"]["kdagen"]["ms"] = 1.01     # within its 2% spread
    b["cases"][0]["results"]["fla"]["ms"] = 2.75        # 9.5% apart: beyond it
    found = {(r["key"][0], r["key"][1], r["library"]): r for r in report.compare(a, b)}
    assert set(found) == {("kda", "fwd", "kdagen"), ("kda", "fwd", "fla"), ("gdn", "bwd", "kdagen"),
                          ("kda", "bwd", "kdagen")}
    assert found[("kda", "fwd", "kdagen")]["agree"] and not found[("kda", "fwd", "fla")]["agree"]
    md = report.compare_markdown(report.compare(a, b), ("a", "b"))
    assert "3/4 cells of the two runs agree within the spread the harness reports" in md
    assert "| kda | fwd | 1x8192x64x128 | FLA | 2.500 | 2.750 | 9.5% | 2.0% | NO |" in md


def test_merge_partial_runs():
    a, b = fake_result(), fake_result()
    b["cases"] = [copy.deepcopy(b["cases"][0])]
    b["cases"][0]["results"]["kdagen"]["ms"] = 0.9
    b["complete"] = False
    merged = report.merge([a, b])
    assert len(merged["cases"]) == 3 and merged["cases"][0]["results"]["kdagen"]["ms"] == 0.9
    assert len(merged["ceilings"]) == 2 and not merged["complete"]
    md = report.markdown(merged)
    assert ("Merged from run 1 (2026-01-02, 3 cases, 1 accuracy entries); run 2 (2026-01-02, 1 cases, "
            "1 accuracy entries).") in md
    assert "Ceilings measured in run 2: device copy" in md and "this run" not in md
    again = report.merge([merged])                   # re-rendering a merged result keeps its runs
    assert again["merged_runs"] == merged["merged_runs"] and report.markdown(again) == md
    third = report.merge([merged, fake_result()])
    assert len(third["merged_runs"]) == len(third["ceilings"]) == 3
    assert "merged_runs" not in report.merge([fake_result()])
    b["env"] = {**b["env"], "device": "NVIDIA A100"}
    with pytest.raises(ValueError, match="different devices"):
        report.merge([a, b])


def test_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "run.png"
    plot.write_png(fake_result(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_matplotlib_is_a_reason(monkeypatch):
    import importlib

    real = importlib.import_module

    def no_matplotlib(name, *args):
        if name == "matplotlib":
            raise ImportError("No module named 'matplotlib'")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_matplotlib)
    assert "pip install 'kdagen[plot]'" in plot.unavailable()


def test_a_reason_keeps_its_footnote_number():
    notes = report.Notes()
    assert [notes.ref("a"), notes.ref("b"), notes.ref("a")] == ["[1]", "[2]", "[1]"]
    assert notes.lines() == ["1. a", "2. b"]


def test_host_table_and_the_mark_of_a_call_that_waited_for_the_gpu():
    result = fake_result()
    assert "Host time per call" not in report.markdown(result)       # runs saved before host times: no table
    first = result["cases"][0]["results"]
    first["kdagen"].update(host_ms=21.5, host_waited=1.0)
    first["fla"].update(host_ms=2.25, host_waited=0.0)
    md = report.markdown(result)
    assert rows(section(md, "Timings"), "chunk_kda")[0][3] == "1.000 (2.0%) ‡"
    host = section(md, "Host time per call")
    assert rows(host, "op")[0] == ["op", "mode", "shape", "kdagen host ms", "FLA host ms"]
    assert rows(host, "chunk_")[0] == ["chunk_kda, softplus gate", "fwd", "1x8192x64x128", "21.50 ‡", "2.25"]
    assert len(rows(host, "chunk_")) == 1


def test_peak_memory_table_side_by_side_and_absent_when_nothing_was_measured():
    result = fake_result()
    assert "Peak memory" not in report.markdown(result)           # a CPU run measures no peak
    result["cases"][0]["results"]["kdagen"]["peak_mib"] = 900.0
    result["cases"][0]["results"]["fla"]["peak_mib"] = 1200.0
    result["cases"][1]["results"]["kdagen"]["peak_mib"] = 512.4
    table = section(report.markdown(result), "Peak memory")
    assert rows(table, "chunk_") == [
        ["chunk_kda, softplus gate", "fwd", "1x8192x64x128", "900", "1200", "0.75"],
        ["chunk_gated_delta_rule", "bwd", "1x8192x64x128", "512", "n/a", "n/a"]]
