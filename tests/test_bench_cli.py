"""`kdagen bench` on a machine without a GPU: help, one-line refusals (exit 2), saved-run tools."""
import argparse
import json

import pytest
import torch

from kdagen.bench import libraries, plot
from kdagen.bench.libraries import Library
from kdagen.commands import bench
from test_bench_report import fake_result


def run_cli(argv, capsys):
    code = bench.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert "examples:" in out and "kdagen bench --out benchmarks/results" in out
    assert "--libs fla" in out and "--compare" in out


def test_register_wires_the_subcommand():
    parser = argparse.ArgumentParser(prog="kdagen")
    bench.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "--ops", "gdn", "--modes", "fwd"])
    assert args.func is bench.run and args.ops == "gdn"


def test_no_gpu_is_one_line_and_exit_1(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, out, err = run_cli(["--libs", "fla"], capsys)
    assert code == 1 and out == ""
    assert err == ("kdagen bench: no CUDA GPU is visible (torch.cuda.is_available() is False); "
                   "the benchmark times GPU kernels\n")


def test_no_fla_is_one_line_and_exit_1(monkeypatch, capsys):
    # pretend there is a GPU: the refusal must come before anything touches it
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(libraries.LOADERS, "fla", lambda: Library(
        "fla", reason="flash-linear-attention unavailable (ModuleNotFoundError: No module named 'fla')"))
    monkeypatch.setitem(libraries.LOADERS, "kdagen", lambda: Library("kdagen", {"chunk_kda": None}))
    code, out, err = run_cli([], capsys)
    assert code == 1 and out == "" and "Traceback" not in err
    assert err == ("kdagen bench: flash-linear-attention unavailable (ModuleNotFoundError: No module named 'fla'); "
                   "pass --libs kdagen to run kdagen alone\n")
    code, _, err = run_cli(["--libs", "fla"], capsys)
    assert code == 1 and err.count("\n") == 1 and "pass --libs" not in err


def test_preflight_passes_when_the_required_libraries_are_there():
    libs = {"kdagen": Library("kdagen", reason="not requested (--libs fla)"), "fla": Library("fla", {})}
    assert bench.preflight(True, libs, ("fla",)) is None
    # the default run requires FLA only: a kdagen without its ops runs as n/a columns
    libs["kdagen"] = Library("kdagen", reason="kdagen ops unavailable (AttributeError: no chunk_kda)")
    assert bench.preflight(True, libs, ("fla",)) is None
    assert bench.preflight(True, libs, ("kdagen", "fla")) == (
        "kdagen ops unavailable (AttributeError: no chunk_kda); pass --libs fla to run fla alone")


@pytest.mark.parametrize("argv, message", [
    (["--ops", "kda,gla"], "--ops: gla not among kda, kda_lb, gdn"),
    (["--modes", "fwd,both"], "--modes: both not among fwd, bwd, fwd+bwd"),
    (["--libs", "triton"], "--libs: triton not among kdagen, fla"),
    (["--shapes", "1x8192x64"], "shape '1x8192x64': expected BxTxHxD"),
    (["--iters", "0"], "--iters must be ≥ 1, got 0"),
    (["--tune-jobs", "-1"], "--tune-jobs must be ≥ 0, got -1"),
    (["--tune-only"], "--tune-only needs --tune-jobs N"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv, message, capsys):
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and err.startswith(f"kdagen bench: {message}") and err.count("\n") == 1


def test_shapes_parse():
    from kdagen.bench.cases import DEFAULT_SHAPES, Shape, parse_shape

    assert parse_shape("1x8192x64x128") == Shape(1, 8192, 64, 128)
    varlen = parse_shape("1300+547+2048+963+271+3063x64x128")
    assert varlen == DEFAULT_SHAPES[-1] and varlen.T == 8192 and varlen.sequences == 6
    assert varlen.cu_seqlens()[-1] == 8192 and Shape.from_dict(varlen.to_dict()) == varlen
    assert [s.name for s in DEFAULT_SHAPES[:4]] == ["1x8192x64x128", "1x32768x16x128", "8x4096x32x128", "4x4096x16x64"]
    with pytest.raises(ValueError, match="≥ 1"):
        parse_shape("0x10x1x1")


def test_output_names(tmp_path):
    assert bench.gpu_slug("NVIDIA H200") == "h200"
    assert bench.gpu_slug("NVIDIA H200 NVL") == "h200-nvl"
    result = fake_result()
    first = bench.output_stem(tmp_path, result)
    assert first == tmp_path / "2026-01-02-h200"
    first.with_suffix(".json").write_text("{}")
    assert bench.output_stem(tmp_path, result) == tmp_path / "2026-01-02-h200-2"
    assert bench.output_stem(tmp_path, result, unique=False) == first


def test_render_adds_the_png_to_a_saved_run(tmp_path, capsys):
    stem = tmp_path / "2026-01-02-h200"
    stem.with_suffix(".json").write_text(json.dumps(fake_result()))
    code, out, err = run_cli(["--render", str(stem.with_suffix(".json")), "--out", str(tmp_path)], capsys)
    assert code == 0 and "### Timings (ms)" in out
    assert json.loads(stem.with_suffix(".json").read_text())["cases"] == fake_result()["cases"]
    assert stem.with_suffix(".md").read_text() == out
    if plot.unavailable() is None:
        assert stem.with_suffix(".png").exists()
    else:
        assert "no PNG: matplotlib is not installed" in err


def test_without_matplotlib_the_png_is_skipped_with_a_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(plot, "unavailable", lambda: "matplotlib is not installed")
    written = bench.write_outputs(fake_result(), tmp_path / "x", "md")
    assert written[-1] == "no PNG: matplotlib is not installed"
    assert not (tmp_path / "x.png").exists() and (tmp_path / "x.json").exists()


def test_compare_prints_the_verdict(tmp_path, capsys):
    a, b = fake_result(), fake_result()
    b["cases"][0]["results"]["fla"]["ms"] = 2.75
    for name, r in (("a", a), ("b", b)):
        (tmp_path / f"{name}.json").write_text(json.dumps(r))
    code, out, _ = run_cli(["--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")], capsys)
    assert code == 0 and "3/4 cells of the two runs agree" in out


def test_unreadable_run_is_one_line(tmp_path, capsys):
    code, _, err = run_cli(["--render", str(tmp_path / "missing.json")], capsys)
    assert code == 2 and err.startswith("kdagen bench: cannot read") and err.count("\n") == 1


def test_measure_and_save_writes_the_run(tmp_path, capsys):
    from kdagen.bench.cases import Shape
    from kdagen.bench.harness import Settings
    from kdagen.bench.timing import WallTimer
    from test_bench_harness import stand_in

    st = Settings(ops=("kda",), modes=("fwd", "bwd"), shapes=(Shape(1, 6, 1, 4),), accuracy_shapes=(),
                  warmup=0, iters=2, input_sets=1, repeats=2, copy_bytes=1 << 16, matmul_n=8)
    libs = {"kdagen": Library("kdagen", {"chunk_kda": stand_in("kda", [])}),
            "fla": Library("fla", reason="not requested (--libs kdagen)")}
    md = bench.measure_and_save(st, libs, tmp_path, device="cpu", timer=WallTimer())
    err = capsys.readouterr().err
    (saved,) = tmp_path.glob("*.json")
    result = json.loads(saved.read_text())
    assert result["complete"] and len(result["cases"]) == 2
    assert saved.with_suffix(".md").read_text() == md + "\n"
    assert "[1/2] kda fwd 1x6x1x4: kdagen" in err and "[2/2] kda bwd" in err and str(saved) in err


def test_compared_runs_of_one_name_are_told_apart_by_folder():
    assert bench.run_names(["x/2026-11-29-h200.json", "y/2026-11-29-h200-2.json"]) == ("2026-11-29-h200",
                                                                                      "2026-11-29-h200-2")
    assert bench.run_names(["a/2026-11-29-h200.json", "b/2026-11-29-h200.json"]) == ("a/2026-11-29-h200",
                                                                                    "b/2026-11-29-h200")
