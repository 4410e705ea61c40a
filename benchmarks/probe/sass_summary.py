"""Where a kernel's time goes by SASS instruction: `python benchmarks/probe/sass_summary.py SOURCE.csv[.gz] [W]`.

SOURCE is Nsight Compute's source page of one kernel (`ncu -i REPORT --kernel-name NAME --page source --csv
--print-source sass`, the report taken with `--section SourceCounters --section WarpStateStats`). Prints, as
Markdown: each opcode's share of the warp instructions executed and of the stall samples, the stall reasons' shares,
and both shares by stretch of W SASS instructions in address order (default 150) with the stretch's count of
global loads, shared loads, barriers and special-function instructions, which place a stretch in the source."""
from __future__ import annotations

import collections
import csv
import gzip
import sys


def rows_of(path: str) -> tuple[list[str], list[list[str]]]:
    opener = gzip.open if path.endswith(".gz") else open
    rows = list(csv.reader(opener(path, "rt")))
    at = next(i for i, r in enumerate(rows) if "Source" in r and any("Executed" in c for c in r))
    return rows[at], rows[at + 1:]


def number(text: str) -> float:
    try:
        return float(text or 0)
    except ValueError:
        return 0.0


def opcode(source: str) -> str:
    words = source.split()
    word = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "?")
    return word.split(".")[0]


def main(path: str, width: int = 150) -> None:
    header, rows = rows_of(path)
    source = header.index("Source")
    executed = next(i for i, c in enumerate(header) if c in ("Warp Instructions Executed", "Instructions Executed"))
    sampled = next(i for i, c in enumerate(header) if c.startswith("Warp Stall Sampling (All"))
    stalls = [i for i, c in enumerate(header) if c.startswith("stall_") and "Not Issued" not in c]
    kept = [r for r in rows if len(r) > max(source, executed, sampled)]
    data = [(opcode(r[source].strip()), number(r[executed]), number(r[sampled])) for r in kept]
    total_e = sum(d[1] for d in data) or 1.0
    total_s = sum(d[2] for d in data) or 1.0
    print(f"{len(data)} SASS instructions, {total_e:.0f} warp instructions executed, {total_s:.0f} samples\n")
    by_op = collections.defaultdict(lambda: [0.0, 0.0])
    for op, e, s in data:
        by_op[op][0] += e
        by_op[op][1] += s
    print("| opcode | share of executions | share of samples |\n| --- | ---: | ---: |")
    for op, (e, s) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:16]:
        print(f"| {op} | {100 * e / total_e:.1f}% | {100 * s / total_s:.1f}% |")
    reasons = collections.Counter({header[i]: sum(number(r[i]) for r in kept if len(r) > i) for i in stalls})
    all_reasons = sum(reasons.values()) or 1.0
    print("\n| stall | share |\n| --- | ---: |")
    for name, n in reasons.most_common(8):
        print(f"| {name} | {100 * n / all_reasons:.1f}% |")
    print("\n| stretch | samples | executions | LDG | LDS | BAR | MUFU |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for start in range(0, len(data), width):
        part = data[start:start + width]
        count = collections.Counter(op for op, _, _ in part)
        print(f"| {start}–{start + len(part)} | {100 * sum(p[2] for p in part) / total_s:.1f}% | "
              f"{100 * sum(p[1] for p in part) / total_e:.1f}% | {count['LDG']} | {count['LDS']} | {count['BAR']} | "
              f"{count['MUFU']} |")


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:3]))
