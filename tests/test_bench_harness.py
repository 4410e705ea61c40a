"""The benchmark harness end to end on CPU, with stand-in libraries, plus its inputs and statistics.

The stand-ins have FLA's signature and compute through the float64 reference, so the harness's
plumbing (identical inputs for both, modes, repeats, refusals, accuracy, JSON) is exercised without
a GPU. The GPU path differs only in the timer (CUDA events instead of the wall clock).
"""
import json

import pytest
import torch

from kdagen.bench import harness, model, report
from kdagen.bench.cases import VARIANTS, Shape
from kdagen.bench.inputs import make_set
from kdagen.bench.libraries import Library, error_text, load
from kdagen.bench.timing import WallTimer, agreement, sample, summarize
from kdagen.reference import Options, recurrent

TRITON_REFUSAL = ("Triton >= 3.4.0 and < 3.7.1 on Hopper GPUs produces incorrect results for gated "
                  "chunk_bwd_dqkwg (see #640).")


class Refusing(torch.autograd.Function):
    """Identity forward whose backward raises, as FLA's GDN backward does on Triton < 3.7.1."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(TRITON_REFUSAL)


def stand_in(op, seen, refuse_backward=False):
    """A chunk_kda / chunk_gated_delta_rule with FLA's keywords, computed by the float64 recurrence."""
    def fn(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
           use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
           lower_bound=None, safe_gate=False, cu_seqlens=None, A_log=None, dt_bias=None):
        assert output_final_state and (safe_gate == (lower_bound is not None))
        seen.append(float(q.detach().float().sum()))
        opt = Options(op=op, scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                      use_gate_in_kernel=use_gate_in_kernel, use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
                      lower_bound=lower_bound)
        x = dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state, A_log=A_log, dt_bias=dt_bias)
        x = {n: t.double() for n, t in x.items()}
        o, ht = recurrent({**x, "cu_seqlens": cu_seqlens}, opt)
        o = o.to(q.dtype)
        return (Refusing.apply(o) if refuse_backward else o), ht.float()
    return fn


SETTINGS = harness.Settings(ops=("kda_lb", "gdn"), modes=("fwd", "bwd", "fwd+bwd"),
                            shapes=(Shape(1, 10, 1, 8), Shape.varlen([3, 6], H=1, D=8)),
                            accuracy_shapes=(Shape(1, 10, 1, 8),), warmup=1, iters=3, input_sets=2, repeats=2,
                            copy_bytes=1 << 20, matmul_n=32)


@pytest.fixture(scope="module")
def run():
    seen = {"kdagen": [], "fla": []}
    libs = {
        "kdagen": Library("kdagen", {"chunk_kda": stand_in("kda", seen["kdagen"]),
                                     "chunk_gated_delta_rule": stand_in("gdn", seen["kdagen"])}, version="test"),
        "fla": Library("fla", {"chunk_kda": stand_in("kda", seen["fla"]),
                               "chunk_gated_delta_rule": stand_in("gdn", seen["fla"], refuse_backward=True)}),
    }
    updates = []
    result = harness.run(SETTINGS, libs, device="cpu", timer=WallTimer(),
                         progress=harness.Progress(update=lambda r: updates.append(len(r["cases"]))))
    return result, seen, updates


def test_every_case_and_mode_is_timed(run):
    result, _, updates = run
    assert result["complete"]
    keys = [(c["op"], c["mode"], c["shape_name"]) for c in result["cases"]]
    assert len(keys) == len(set(keys)) == 2 * 2 * 3
    assert updates[:3] == [1, 2, 3]          # the partial result is handed out after every case
    for case in result["cases"]:
        kd = case["results"]["kdagen"]
        assert kd["status"] == "ok"
        assert [len(s) for s in kd["samples_ms"]] == [SETTINGS.iters] * SETTINGS.repeats
        assert kd["ms"] == pytest.approx(summarize(sum(kd["samples_ms"], []))["median"])
        assert set(kd["repeat_agreement"]) == {"rel_diff", "allowed", "agree"}
        assert kd["floor_share"] == pytest.approx(case["work"]["floor_ms"] / kd["ms"])
        assert kd["peak_mib"] is None            # the CPU allocator keeps no peak: none is made up


def test_fla_refusal_is_a_cell_not_a_crash(run):
    result, _, _ = run
    for case in result["cases"]:
        fla = case["results"]["fla"]
        if case["op"] == "gdn" and case["mode"] != "fwd":
            assert fla == {"status": "error", "reason": f"refused by FLA: RuntimeError: {TRITON_REFUSAL}"}
        else:
            assert fla["status"] == "ok"
    md = report.markdown(result)
    assert f"refused by FLA: RuntimeError: {TRITON_REFUSAL}" in md


def test_both_libraries_see_identical_inputs_cycling_through_the_sets(run):
    _, seen, _ = run
    # q is drawn first from seed + set index, so it identifies the set: both libraries saw the same
    # inputs, and every case cycled through all its sets (the accuracy shape repeats set 0 of the first)
    assert set(seen["fla"]) == set(seen["kdagen"])
    assert len(set(seen["kdagen"])) == SETTINGS.input_sets * len(SETTINGS.shapes)


def test_work_comes_from_the_model_with_the_inputs_dtypes(run):
    result, _, _ = run
    case = next(c for c in result["cases"] if c["op"] == "kda_lb" and c["mode"] == "fwd" and c["shape"]["lengths"])
    expected = model.call_work("kda", "fwd", tokens=9, sequences=2, HV=1, K=8, V=8)   # bf16 everywhere
    assert {k: case["work"][k] for k in expected} == expected
    c = result["ceilings"][0]
    floor = 1e3 * max(expected["flops"] / c["matmul"]["flops_per_s"], expected["bytes"] / c["copy"]["bytes_per_s"])
    assert case["work"]["floor_ms"] == pytest.approx(floor)


def test_accuracy_side_by_side(run):
    result, _, _ = run
    by_op = {e["op"]: e["results"] for e in result["accuracy"]}
    for op, res in by_op.items():
        kd = res["kdagen"]
        assert kd["note"] is None
        assert set(kd["errors"]) == {"o", "ht", "q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state"}
        assert all(0 <= e < 1e-2 for e in kd["errors"].values())   # bf16 rounding of o and of the grads only
    gdn_fla = by_op["gdn"]["fla"]
    assert gdn_fla["note"] == f"backward refused by FLA: RuntimeError: {TRITON_REFUSAL}"
    assert set(gdn_fla["errors"]) == {"o", "ht"}


def test_result_is_json_and_renders_after_a_round_trip(run):
    result, _, _ = run
    again = json.loads(json.dumps(result))
    assert report.markdown(again) == report.markdown(result)


def test_peak_memory_measures_one_more_call_of_the_mode_and_a_failure_is_no_figure(monkeypatch):
    seen = []

    def fake_peak(prepare, timed, device):     # what CUDA would measure: one prepared call of the cell's mode
        timed(prepare(0))
        seen.append(len(seen))
        if len(seen) == 2:
            raise torch.OutOfMemoryError("the extra call ran out of memory")
        return 3 * 2**20
    monkeypatch.setattr(harness, "peak_bytes", fake_peak)
    st = harness.Settings(ops=("kda_lb",), modes=("fwd+bwd",), shapes=(Shape(1, 10, 1, 8),), accuracy_shapes=(),
                          warmup=0, iters=1, input_sets=1, repeats=1, copy_bytes=1 << 20, matmul_n=32)
    libs = {n: Library(n, {"chunk_kda": stand_in("kda", [])}, version="test") for n in ("kdagen", "fla")}
    result = harness.run(st, libs, device="cpu", timer=WallTimer())
    cells = result["cases"][0]["results"]
    assert [cells[n]["status"] for n in ("kdagen", "fla")] == ["ok", "ok"]     # the timings stand
    assert cells["kdagen"]["peak_mib"] == 3.0 and cells["fla"]["peak_mib"] is None


def test_missing_library_or_function_gives_n_a_cells_with_the_reason():
    libs = {"kdagen": Library("kdagen", {"chunk_kda": stand_in("kda", [])},
                              missing={"chunk_gated_delta_rule": "AttributeError: no chunk_gated_delta_rule"}),
            "fla": Library("fla", reason="flash-linear-attention unavailable (ModuleNotFoundError: fla)")}
    st = harness.Settings(ops=("kda", "gdn"), modes=("fwd",), shapes=(Shape(1, 4, 1, 4),), accuracy_shapes=(),
                          warmup=0, iters=1, input_sets=1, repeats=1, copy_bytes=1 << 16, matmul_n=8)
    result = harness.run(st, libs, device="cpu", timer=WallTimer())
    kda, gdn = (c["results"] for c in result["cases"])
    assert kda["kdagen"]["status"] == "ok" and "repeat_agreement" not in kda["kdagen"]
    assert kda["fla"] == gdn["fla"] == {"status": "n/a", "reason": libs["fla"].reason}
    assert gdn["kdagen"] == {
        "status": "n/a", "reason": "kdagen has no chunk_gated_delta_rule (AttributeError: no chunk_gated_delta_rule)"}


def test_libraries_not_requested_say_so():
    libs = load(("fla",))
    assert libs["kdagen"].reason == "not requested (--libs fla)"


def test_inputs_follow_fla_benchmarks():
    v = VARIANTS["kda"]
    s = make_set(v, Shape.varlen([5, 3], H=2, D=4), device="cpu", seed=3)
    x = s.inputs
    assert {n: tuple(t.shape) for n, t in x.items()} == {
        "q": (1, 8, 2, 4), "k": (1, 8, 2, 4), "v": (1, 8, 2, 4), "g": (1, 8, 2, 4), "beta": (1, 8, 2),
        "initial_state": (2, 2, 4, 4), "A_log": (2,), "dt_bias": (8,), "cu_seqlens": (3,)}
    assert all(x[n].dtype == torch.bfloat16 for n in ("q", "k", "v", "g", "beta"))
    assert all(x[n].dtype == torch.float32 for n in ("initial_state", "A_log", "dt_bias"))
    assert x["cu_seqlens"].tolist() == [0, 5, 8] and x["cu_seqlens"].dtype == torch.int64
    assert s.leaves == ["q", "k", "v", "g", "beta", "initial_state", "A_log", "dt_bias"]
    assert all(x[n].requires_grad for n in s.leaves)
    a = make_set(v, Shape(1, 4000, 4, 4), device="cpu", seed=0).inputs["A_log"].exp()
    assert 1 <= a.min() and a.max() <= 16
    gdn = make_set(VARIANTS["gdn"], Shape(2, 3, 2, 4), device="cpu", seed=0).inputs
    assert gdn["g"].shape == (2, 3, 2) and gdn["dt_bias"].shape == (2,) and "cu_seqlens" not in gdn
    same, other = (make_set(v, Shape(1, 6, 1, 4), device="cpu", seed=k) for k in (3, 3))
    assert all(torch.equal(same.inputs[n], other.inputs[n]) for n in same.leaves)
    assert not torch.equal(make_set(v, Shape(1, 6, 1, 4), device="cpu", seed=4).inputs["q"], same.inputs["q"])


def test_call_kwargs_per_variant():
    assert VARIANTS["kda_lb"].call_kwargs() == dict(
        output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
        use_beta_sigmoid_in_kernel=True, lower_bound=-5.0, safe_gate=True)
    assert "lower_bound" not in VARIANTS["kda"].call_kwargs()
    assert VARIANTS["gdn"].options().op == "gdn" and VARIANTS["kda_lb"].options().lower_bound == -5.0


class CountingTimer:
    def __init__(self):
        self.states = []
        self.resets = 0

    def reset(self):
        self.resets += 1

    def measure(self, timed, state=None):
        self.states.append(state)
        timed(state)
        return float(len(self.states))


def test_sample_cycles_sets_and_drops_warmup():
    timer = CountingTimer()
    xs = sample(timer, lambda i: i, lambda s: None, sets=3, warmup=2, iters=4)
    assert timer.states == [0, 1, 2, 0, 1, 2]
    assert xs == [3.0, 4.0, 5.0, 6.0]
    assert timer.resets == 1            # a series starts fresh: the queue-ahead is sized by its own warm-up


def test_summary_and_agreement():
    s = summarize([5, 1, 4, 2, 3])
    assert (s["median"], s["p25"], s["p75"], s["min"], s["max"], s["n"]) == (3, 2, 4, 1, 5, 5)
    assert s["spread"] == pytest.approx(2 / 3)
    assert summarize([2.0])["spread"] == 0
    a = {"median": 1.00, "spread": 0.02}
    assert agreement([a, {"median": 1.01, "spread": 0.01}])["agree"]
    verdict = agreement([a, {"median": 1.05, "spread": 0.01}])
    assert not verdict["agree"] and verdict["rel_diff"] == pytest.approx(0.05 / 1.025) and verdict["allowed"] == 0.02


def test_error_text_is_one_line():
    assert error_text(RuntimeError("first\nsecond")) == "RuntimeError: first"
    assert error_text(NotImplementedError()) == "NotImplementedError"


def test_a_library_is_usable_with_some_of_its_functions():
    from kdagen.bench.libraries import collect

    def lookup(function):
        if function == "chunk_kda":
            return print
        raise AttributeError(f"no {function}")

    lib = collect("kdagen", lookup, "kdagen ops", "0.1")
    assert lib.available and lib.unavailable("chunk_kda") is None
    assert lib.unavailable("chunk_gated_delta_rule") == \
        "kdagen has no chunk_gated_delta_rule (AttributeError: no chunk_gated_delta_rule)"
    none = collect("fla", lambda f: __import__("no_such_fla"), "flash-linear-attention", None)
    assert not none.available
    assert none.reason == "flash-linear-attention unavailable (ModuleNotFoundError: No module named 'no_such_fla')"


def test_a_failing_reference_is_a_note_not_a_crash(monkeypatch):
    from kdagen.bench import accuracy

    def out_of_memory(variant, s):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 40.00 GiB")

    monkeypatch.setattr(accuracy, "reference", out_of_memory)
    libs = {"kdagen": Library("kdagen", {"chunk_kda": None}), "fla": Library("fla", {"chunk_kda": None})}
    entry = harness.accuracy_case(VARIANTS["kda"], Shape(1, 10, 1, 8), libs, "cpu", 0)
    note = "float64 reference failed: OutOfMemoryError: CUDA out of memory. Tried to allocate 40.00 GiB"
    assert entry["results"] == {"kdagen": {"errors": {}, "note": note}, "fla": {"errors": {}, "note": note}}
