"""Markdown from a result dict, comparison of two runs, and merging of partial runs.

Everything here reads the JSON-shaped dict only, so a saved run renders the same as a fresh one.
"""
from __future__ import annotations

from .libraries import NAMES, TITLES
from .timing import agreement

ACCURACY_COLUMNS = {"o": "o", "ht": "ht", "q": "dq", "k": "dk", "v": "dv", "g": "dg", "beta": "dβ",
                    "A_log": "dA_log", "dt_bias": "ddt_bias", "initial_state": "dh0"}


class Notes:
    """Numbered footnotes: one number per distinct reason."""

    def __init__(self):
        self.reasons: list[str] = []

    def ref(self, reason: str) -> str:
        if reason not in self.reasons:
            self.reasons.append(reason)
        return f"[{self.reasons.index(reason) + 1}]"

    def lines(self) -> list[str]:
        return [f"{i}. {r}" for i, r in enumerate(self.reasons, 1)]


def _table(header: list[str], rows: list[list[str]], right_from: int) -> list[str]:
    align = ["---" if i < right_from else "---:" for i in range(len(header))]
    return ["| " + " | ".join(r) + " |" for r in [header, align, *rows]]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _rel(x) -> str:
    if x is None:
        return "—"
    return "nan" if x != x else f"{x:.2e}"


def _key(case: dict) -> tuple:
    return case["op"], case["mode"], case["shape_name"]


def _time_cell(c: dict, notes: Notes) -> str:
    if c["status"] != "ok":
        return f"n/a {notes.ref(c['reason'])}"
    flag = "" if c.get("repeat_agreement", {"agree": True})["agree"] else " ⚠"
    return f"{c['ms']:.3f} ({_pct(c['spread'])}){flag}{_waited(c)}"


def _waited(c: dict) -> str:
    return " ‡" if c.get("host_waited", 0) > 0.5 else ""


def header_lines(result: dict) -> list[str]:
    env, st = result["env"], result["settings"]
    versions = env.get("versions", {})
    lines = [f"## kdagen vs flash-linear-attention on {env['device']} ({env['date']})", "",
             " · ".join(f"{k} {v}" for k, v in [("torch", env.get("torch")), ("CUDA", env.get("cuda")),
                                                 ("Triton", env.get("triton")), ("FLA", versions.get("fla")),
                                                 ("kdagen", versions.get("kdagen")), ("python", env.get("python"))]
                        if v), ""]
    merged = result.get("merged_runs", [])
    if merged:
        lines += ["Merged from " + "; ".join(f"run {i + 1} ({m})" for i, m in enumerate(merged))
                  + ". A later run's cell replaces an earlier one's; each cell's floor uses its own run's ceilings.", ""]
    for i, c in enumerate(result["ceilings"]):
        where = f"run {i + 1}" if merged else "this run"
        lines.append(f"Ceilings measured in {where}: device copy {c['copy']['bytes_per_s'] / 1e12:.3f} TB/s "
                     f"(spread {_pct(c['copy']['spread'])}), bf16 matmul {c['matmul']['flops_per_s'] / 1e12:.1f} "
                     f"TFLOP/s (spread {_pct(c['matmul']['spread'])}).")
    lines += ["", f"Timing: {result['timer']}; median of {st['iters']} calls after {st['warmup']} warm-up, "
              f"cycling over {st['input_sets']} input sets, {st['repeats']} repeats. "
              "In brackets, the spread: interquartile range / median; ⚠ marks a cell whose repeats "
              "disagree beyond it; ‡ a cell where, in most calls of a repeat, the GPU caught up with the host "
              "before the call was issued (a sync inside the call, or host work longer than the spin), so its "
              "time includes host work. "
              "FLA / kdagen > 1 means kdagen is faster. Floor: max(FLOPs / matmul rate, "
              f"compulsory bytes / copy bandwidth), model at C = {st['chunk']} (benchmarks/README.md).", ""]
    return lines


def timing_table(result: dict, notes: Notes) -> list[str]:
    header = ["op", "mode", "shape", *(f"{TITLES[n]} ms" for n in NAMES), "FLA / kdagen",
              *(f"{TITLES[n]} % of floor" for n in NAMES), "floor ms"]
    rows = []
    for case in result["cases"]:
        r = case["results"]
        ok = {n: r[n]["status"] == "ok" for n in NAMES}
        ratio = f"{r['fla']['ms'] / r['kdagen']['ms']:.2f}×" if all(ok.values()) else "n/a"
        rows.append([case["label"], case["mode"], case["shape_name"], *(_time_cell(r[n], notes) for n in NAMES),
                     ratio, *(_pct(r[n]["floor_share"]) if ok[n] else "n/a" for n in NAMES),
                     f"{case['work']['floor_ms']:.3f}"])
    return _table(header, rows, right_from=3)


def headline_table(result: dict) -> list[str]:
    """One row per op and shape, one column per mode: kdagen ms / FLA ms (FLA / kdagen). The README's table."""
    modes = list(dict.fromkeys(case["mode"] for case in result["cases"]))
    rows: dict[tuple, dict] = {}
    for case in result["cases"]:
        r = case["results"]
        kd, fla = (f"{r[n]['ms']:.2f}" if r[n]["status"] == "ok" else "n/a" for n in NAMES)
        ratio = f" ({r['fla']['ms'] / r['kdagen']['ms']:.2f}×)" if "n/a" not in (kd, fla) else ""
        rows.setdefault((case["label"], case["shape_name"]), {})[case["mode"]] = f"{kd} / {fla}{ratio}"
    header = ["op", "shape", *(f"{m}: kdagen / FLA ms" for m in modes)]
    return _table(header, [[*key, *(cells.get(m, "—") for m in modes)] for key, cells in rows.items()],
                  right_from=2)


def repeat_lines(result: dict) -> list[str]:
    """Point 2 within one run: do the repeats of every cell agree within the spread?"""
    checked = [(case, n, case["results"][n]["repeat_agreement"]) for case in result["cases"] for n in NAMES
               if "repeat_agreement" in case["results"][n]]
    if not checked:
        return ["Repeat agreement: no cell was measured more than once."]
    bad = [(case, n, a) for case, n, a in checked if not a["agree"]]
    worst = max(checked, key=lambda t: t[2]["rel_diff"])
    lines = [f"Repeat agreement: {len(checked) - len(bad)}/{len(checked)} cells agree within their spread "
             f"(largest difference between repeats {_pct(worst[2]['rel_diff'])} of the median, "
             f"{worst[1]} {' '.join(_key(worst[0]))}, spread {_pct(worst[2]['allowed'])})."]
    lines += [f"- ⚠ {n} {' '.join(_key(case))}: repeats differ by {_pct(a['rel_diff'])} > spread {_pct(a['allowed'])}"
              for case, n, a in bad]
    return lines


def host_table(result: dict) -> list[str]:
    """The host's time to issue one call: what an eager caller pays when it exceeds the device time."""
    rows = []
    for case in result["cases"]:
        r = case["results"]
        cells = [f"{r[n]['host_ms']:.2f}{_waited(r[n])}" if "host_ms" in r[n] else "n/a" for n in NAMES]
        if any(c != "n/a" for c in cells):
            rows.append([case["label"], case["mode"], case["shape_name"], *cells])
    if not rows:
        return []
    header = ["op", "mode", "shape", *(f"{TITLES[n]} host ms" for n in NAMES)]
    return ["### Host time per call (ms, median)", "",
            "From the call to its return on the host (Python, checks, launches); the GPU runs behind it. "
            "A call whose host time exceeds its device time above is host-bound in eager use. In a ‡ cell the "
            "host time includes waiting for the GPU (the timer's spin and the work queued before the sync).", "",
            *_table(header, rows, right_from=3), ""]


def memory_table(result: dict) -> list[str]:
    """Each library's peak memory per call (MiB above its inputs), measured once after the timing."""
    rows = []
    for case in result["cases"]:
        peak = {n: case["results"][n].get("peak_mib") for n in NAMES}
        if any(p is not None for p in peak.values()):
            ratio = f"{peak['kdagen'] / peak['fla']:.2f}" if peak["kdagen"] is not None and peak["fla"] else "n/a"
            rows.append([case["label"], case["mode"], case["shape_name"],
                         *(f"{p:.0f}" if p is not None else "n/a" for p in peak.values()), ratio])
    if not rows:
        return []
    header = ["op", "mode", "shape", *(f"{TITLES[n]} MiB" for n in NAMES), "kdagen / FLA"]
    return ["### Peak memory per call (MiB)", "",
            "The most the call allocates above what it is handed (its inputs; in bwd mode also the forward's "
            "saved tensors), from the CUDA allocator's peak during one untimed call after the timing.", "",
            *_table(header, rows, right_from=3), ""]


def accuracy_table(result: dict, notes: Notes) -> list[str]:
    header = ["op", "shape", "library", *ACCURACY_COLUMNS.values(), "note"]
    rows = []
    for entry in result["accuracy"]:
        for n in NAMES:
            r = entry["results"][n]
            errs = r["errors"]
            rows.append([entry["label"], entry["shape_name"], TITLES[n],
                         *(_rel(errs.get(k)) for k in ACCURACY_COLUMNS),
                         notes.ref(r["note"]) if r["note"] else ""])
    return _table(header, rows, right_from=3)


def markdown(result: dict) -> str:
    notes = Notes()
    lines = header_lines(result)
    if not result.get("complete", True):
        lines += ["**Partial run**: it stopped before the end; the cases below are those it finished.", ""]
    lines += ["### Summary: kdagen / FLA ms (FLA / kdagen)", "", *headline_table(result), "",
              "### Timings (ms)", "", *timing_table(result, notes), "", *repeat_lines(result), "",
              *host_table(result), *memory_table(result)]
    if result["accuracy"]:
        lines += ["### Accuracy against float64 (relative L2)", "", *accuracy_table(result, notes), ""]
    if notes.reasons:
        lines += ["Notes:", "", *notes.lines(), ""]
    return "\n".join(lines)


RUN_PARTS = {"env": dict, "settings": dict, "timer": str, "ceilings": list, "cases": list, "accuracy": list}
_JSON_NAMES = {dict: "an object", list: "an array", str: "a string"}


def check_run(run) -> dict:
    """A loaded JSON file as a saved run, else ValueError naming what it lacks (--compare and --render read files
    the user names, which may be any JSON)."""
    if not isinstance(run, dict):
        raise ValueError("not a kdagen bench run: the JSON is not an object")
    wrong = [f"{key} ({_JSON_NAMES[kind]})" for key, kind in RUN_PARTS.items() if not isinstance(run.get(key), kind)]
    if wrong:
        raise ValueError(f"not a kdagen bench run: it lacks {', '.join(wrong)}")
    return run


def compare(a: dict, b: dict) -> list[dict]:
    """Cells measured in both runs, and whether their medians agree within the larger spread."""
    cases_b = {_key(c): c for c in b["cases"]}
    rows = []
    for case in a["cases"]:
        other = cases_b.get(_key(case))
        for n in NAMES:
            if other is None or case["results"][n]["status"] != "ok" or other["results"][n]["status"] != "ok":
                continue
            x, y = case["results"][n], other["results"][n]
            verdict = agreement([{"median": c["ms"], "spread": c["spread"]} for c in (x, y)])
            rows.append({"key": _key(case), "library": n, "ms": (x["ms"], y["ms"]), **verdict})
    return rows


def compare_markdown(rows: list[dict], names: tuple[str, str]) -> str:
    header = ["op", "mode", "shape", "library", f"{names[0]} ms", f"{names[1]} ms", "difference", "spread", "agree"]
    body = [[*r["key"], TITLES[r["library"]], f"{r['ms'][0]:.3f}", f"{r['ms'][1]:.3f}", _pct(r["rel_diff"]),
             _pct(r["allowed"]), "yes" if r["agree"] else "NO"] for r in rows]
    agree = sum(r["agree"] for r in rows)
    verdict = (f"{agree}/{len(rows)} cells of the two runs agree within the spread the harness reports "
               "(difference of medians / mean ≤ the larger interquartile range / median).")
    return "\n".join([*_table(header, body, right_from=4), "", verdict])


def merge(results: list[dict]) -> dict:
    """Several partial runs on one GPU as one result; a later run's cell replaces an earlier one's."""
    devices = {r["env"]["device"] for r in results}
    if len(devices) > 1:
        raise ValueError(f"cannot merge runs from different devices: {sorted(devices)}")
    cases, acc = {}, {}
    for r in results:
        cases.update({_key(c): c for c in r["cases"]})
        acc.update({(e["op"], e["shape_name"]): e for e in r["accuracy"]})
    first = results[0]
    runs = [run for r in results for run in r.get("merged_runs") or [_describe_run(r)]]
    merged = {**first, "complete": all(r.get("complete", True) for r in results),
              "ceilings": [c for r in results for c in r["ceilings"]], "cases": list(cases.values()),
              "accuracy": list(acc.values())}
    if len(runs) > 1:
        merged["merged_runs"] = runs
    return merged


def _describe_run(r: dict) -> str:
    when = f"{r['env']['date']} {r['env'].get('time', '')}".strip()
    return f"{when}, {len(r['cases'])} cases, {len(r['accuracy'])} accuracy entries"
