"""One benchmark run, from settings to a plain dict (the JSON file).

For each op variant and shape it draws a few input sets once, then for each mode times every
available library on those same sets: warm-up, then the median of N calls cycling through the sets,
repeated R times with the libraries interleaved so that the repeats are apart in time. The
ceilings (copy bandwidth, bf16 matmul rate) are measured first, in the same process, and turn the
model's FLOPs and bytes into a floor per case. Accuracy runs last, on small shapes of its own.
"""
from __future__ import annotations

import platform
import statistics
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Callable

import torch

from . import accuracy, model
from .cases import ACCURACY_SHAPES, DEFAULT_SHAPES, MODES, VARIANTS, Shape, Variant
from .inputs import InputSet, make_set
from .libraries import Library, error_text, installed_version
from .timing import agreement, copy_bandwidth, matmul_rate, peak_bytes, sample, summarize

SCHEMA = 1


@dataclass(frozen=True)
class Settings:
    ops: tuple[str, ...] = tuple(VARIANTS)
    modes: tuple[str, ...] = MODES
    shapes: tuple[Shape, ...] = DEFAULT_SHAPES
    accuracy_shapes: tuple[Shape, ...] = ACCURACY_SHAPES
    warmup: int = 3
    iters: int = 20
    input_sets: int = 3
    repeats: int = 2
    chunk: int = 64             # chunk size of the FLOPs model behind the floor
    seed: int = 0
    copy_bytes: int = 1 << 30   # ceiling measurements
    matmul_n: int = 8192

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shapes"] = [s.to_dict() for s in self.shapes]
        d["accuracy_shapes"] = [s.to_dict() for s in self.accuracy_shapes]
        return d


@dataclass
class Progress:
    """Where the run reports: a line per step, and the partial result after every case."""
    log: Callable[[str], None] = field(default=lambda line: None)
    update: Callable[[dict], None] = field(default=lambda result: None)


def environment(device, libs: dict[str, Library]) -> dict:
    dev = torch.device(device)
    env = {"date": datetime.now().strftime("%Y-%m-%d"), "time": datetime.now().strftime("%H:%M:%S"),
           "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "triton": installed_version("triton"), "cupy": installed_version("cupy-cuda13x", "cupy-cuda12x"),
           "versions": {name: lib.version for name, lib in libs.items()}}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        env.update(device=props.name, capability=f"{props.major}.{props.minor}", sms=props.multi_processor_count,
                   memory_gib=round(props.total_memory / 2**30, 1))
    else:
        env.update(device=platform.processor() or platform.machine() or "cpu")
    return env


def measure_ceilings(timer, device, st: Settings) -> dict:
    return {"copy": copy_bandwidth(timer, device, nbytes=st.copy_bytes),
            "matmul": matmul_rate(timer, device, n=st.matmul_n)}


def work(variant: Variant, shape: Shape, mode: str, s: InputSet, chunk: int) -> dict:
    """FLOPs, compulsory bytes and token·heads of one call, with the dtypes of the actual inputs."""
    x = s.inputs
    sizes = model.Sizes(qk=x["q"].element_size(), v=x["v"].element_size(), g=x["g"].element_size(),
                        beta=x["beta"].element_size(), o=x["v"].element_size())
    return model.call_work(variant.op, mode, tokens=shape.tokens, sequences=shape.sequences, HV=shape.H,
                           K=shape.D, V=shape.D, C=chunk, sizes=sizes)


def floor_ms(w: dict, ceilings: dict) -> float:
    return 1e3 * model.floor_seconds(w["flops"], w["bytes"], ceilings["matmul"]["flops_per_s"],
                                     ceilings["copy"]["bytes_per_s"])


def steps(fn, kwargs: dict, sets: list[InputSet], mode: str):
    """(prepare(i) -> state, timed(state)) for one call in `mode`; prepare runs outside the timing."""
    def call(s):
        return fn(**s.inputs, **kwargs)

    if mode == "fwd":
        def forward(s):
            with torch.no_grad():
                call(s)
        return sets.__getitem__, forward
    if mode == "bwd":
        return (lambda i: (sets[i], call(sets[i]))), (lambda state: state[0].grads(state[1]))
    return sets.__getitem__, (lambda s: s.grads(call(s)))


def cell(summaries: list[dict], w: dict) -> dict:
    """A measured cell: the pooled median and spread, the repeats and whether they agree."""
    pooled = summarize([x for s in summaries for x in s["samples"]])
    repeats = [{k: v for k, v in s.items() if k != "samples"} for s in summaries]
    out = {"status": "ok", "ms": pooled["median"], "spread": pooled["spread"], "repeats": repeats,
           "host_ms": statistics.median(s["host_ms"] for s in summaries),
           "host_waited": max(s["waited"] for s in summaries),
           "samples_ms": [s["samples"] for s in summaries], "floor_share": w["floor_ms"] / pooled["median"]}
    if len(summaries) > 1:
        out["repeat_agreement"] = agreement(repeats)
    return out


def _empty_cache(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def time_case(variant: Variant, mode: str, sets: list[InputSet], libs: dict[str, Library], timer, st: Settings,
              w: dict) -> dict:
    """Every library's cell for one case: measured, n/a (with the reason) or the error it raised."""
    results = {name: {"status": "n/a", "reason": lib.unavailable(variant.function)}
               for name, lib in libs.items() if lib.unavailable(variant.function)}
    summaries = {name: [] for name in libs if name not in results}
    for _ in range(st.repeats):
        for name in [n for n in summaries if n not in results]:
            lib = libs[name]
            prepare, timed = steps(lib.functions[variant.function], variant.call_kwargs(), sets, mode)
            try:
                xs = sample(timer, prepare, timed, sets=len(sets), warmup=st.warmup, iters=st.iters)
            except Exception as e:  # the library refused or failed this config: a cell, not a crash
                results[name] = {"status": "error", "reason": f"{lib.failure_prefix}: {error_text(e)}"}
                _empty_cache(sets[0].do.device)
                continue
            host, waited = timer.host_ms[st.warmup:] or timer.host_ms, timer.waited[st.warmup:] or timer.waited
            summaries[name].append({**summarize(xs), "samples": xs, "host_ms": statistics.median(host),
                                    "waited": sum(waited) / len(waited)})
    for name, s in summaries.items():
        if name not in results:
            results[name] = {**cell(s, w), "peak_mib": _peak_mib(libs[name], variant, mode, sets)}
    return {name: results[name] for name in libs}


def _peak_mib(lib: Library, variant: Variant, mode: str, sets: list[InputSet]) -> float | None:
    """One more call, untimed, for its peak memory (MiB above its inputs); None where it cannot be measured (off
    CUDA, or the extra call failed: its timings stand)."""
    prepare, timed = steps(lib.functions[variant.function], variant.call_kwargs(), sets, mode)
    device = sets[0].do.device
    _empty_cache(device)
    try:
        peak = peak_bytes(prepare, timed, device)
    except Exception:  # e.g. out of memory on the extra call
        peak = None
    _empty_cache(device)
    return None if peak is None else peak / 2**20


def accuracy_case(variant: Variant, shape: Shape, libs: dict[str, Library], device, seed: int) -> dict:
    """Both libraries' errors against float64 at one shape; a reference that fails (e.g. out of memory:
    it keeps every step's state) is a note in each library's row, and the run goes on."""
    entry = {"op": variant.key, "label": variant.label, "shape": shape.to_dict(), "shape_name": shape.name}
    s = make_set(variant, shape, device=device, seed=seed)
    try:
        ref = accuracy.reference(variant, s)
    except Exception as e:  # the measurement's own failure, not a library's
        _empty_cache(device)
        note = f"float64 reference failed: {error_text(e)}"
        return {**entry, "results": {name: {"errors": {}, "note": note} for name in libs}}
    return {**entry, "results": {name: accuracy.library_errors(lib, variant, s, ref) for name, lib in libs.items()}}


def _progress_line(case: dict, index: int, total: int) -> str:
    cells = []
    for name, c in case["results"].items():
        cells.append(f"{name} {c['ms']:.3f} ms" if c["status"] == "ok" else f"{name} {c['status']}")
    return f"[{index}/{total}] {case['op']} {case['mode']} {case['shape_name']}: " + ", ".join(cells)


def run(st: Settings, libs: dict[str, Library], *, device, timer, progress: Progress = Progress()) -> dict:
    result = {"schema": SCHEMA, "complete": False, "env": environment(device, libs), "settings": st.to_dict(),
              "timer": timer.description, "libraries": {n: lib.describe() for n, lib in libs.items()},
              "ceilings": [], "cases": [], "accuracy": []}
    ceilings = measure_ceilings(timer, device, st)
    result["ceilings"].append(ceilings)
    progress.log(f"ceilings: copy {ceilings['copy']['bytes_per_s'] / 1e12:.3f} TB/s, "
                 f"bf16 matmul {ceilings['matmul']['flops_per_s'] / 1e12:.1f} TFLOP/s")
    total = len(st.ops) * len(st.shapes) * len(st.modes)
    for variant in (VARIANTS[k] for k in st.ops):
        for shape in st.shapes:
            sets = [make_set(variant, shape, device=device, seed=st.seed + i) for i in range(st.input_sets)]
            for mode in st.modes:
                w = work(variant, shape, mode, sets[0], st.chunk)
                w["floor_ms"] = floor_ms(w, ceilings)
                case = {"op": variant.key, "label": variant.label, "mode": mode, "shape": shape.to_dict(),
                        "shape_name": shape.name, "work": w,
                        "results": time_case(variant, mode, sets, libs, timer, st, w)}
                result["cases"].append(case)
                progress.log(_progress_line(case, len(result["cases"]), total))
                progress.update(result)
            del sets
            _empty_cache(device)
    for variant in (VARIANTS[k] for k in st.ops):
        for shape in st.accuracy_shapes:
            result["accuracy"].append(accuracy_case(variant, shape, libs, device, st.seed))
            progress.log(f"accuracy {variant.key} {shape.name} done")
            progress.update(result)
    result["complete"] = True
    return result
