"""nvcc as an inspection tool: compile a rendered unit to a cubin and read ptxas's resource report
(registers, spills, shared memory per kernel), or emit PTX / SASS. Needs nvcc on PATH (no GPU)."""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, \d+ bytes cumulative stack size)?"
                   r"(?:, (\d+) bytes smem)?")


class NvccUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class Resources:
    """ptxas's report for one kernel."""
    kernel: str
    arch: str
    registers: int
    stack: int
    spill_stores: int
    spill_loads: int
    smem: int                      # static shared memory (bytes)


def nvcc_path() -> str:
    path = shutil.which("nvcc")
    if path is None:
        raise NvccUnavailable("nvcc is not on PATH")
    return path


def _run(args: list[str], source: str, suffix: str) -> tuple[str, bytes]:
    with tempfile.TemporaryDirectory(prefix="kdagen-nvcc-") as tmp:
        src, out = Path(tmp) / "unit.cu", Path(tmp) / f"unit{suffix}"
        src.write_text(source)
        res = subprocess.run([nvcc_path(), *args, str(src), "-o", str(out)], capture_output=True, text=True)
        if res.returncode:
            raise RuntimeError(f"nvcc {' '.join(args)} failed:\n{res.stderr[-6000:]}")
        return res.stdout + res.stderr, out.read_bytes()


def parse_report(text: str) -> dict[str, Resources]:
    """Resources per kernel from `-Xptxas -v` output."""
    found, current = {}, None
    spill = (0, 0, 0)
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = (m.group(1), m.group(2))
        elif current and (m := _SPILL.search(line)):
            spill = tuple(int(x) for x in m.groups())
        elif current and (m := _USED.search(line)):
            name, arch = current
            found[name] = Resources(name, arch, int(m.group(1)), *spill, int(m.group(2) or 0))
            current, spill = None, (0, 0, 0)
    return found


def resources(source: str, arch: str, options=()) -> dict[str, Resources]:
    """Compile to a cubin for arch (sm_90a, sm_80) and return ptxas's report per kernel; `options` go to nvcc
    (e.g. ("-Werror", "all-warnings"))."""
    report, _ = _run(["-cubin", f"-arch={arch}", "-Xptxas", "-v", *options], source, ".cubin")
    return parse_report(report)


def ptx(source: str, arch: str, options=()) -> str:
    """The PTX of a unit; `options` go to nvcc (e.g. ("-lineinfo",) for template line numbers)."""
    return _run(["-ptx", f"-arch={arch}", *options], source, ".ptx")[1].decode()


def sass(source: str, arch: str) -> str:
    tool = shutil.which("cuobjdump") or shutil.which("cuobjdump", path=str(Path(nvcc_path()).resolve().parent))
    if tool is None:
        raise NvccUnavailable("cuobjdump (for SASS) is not installed beside nvcc; install the full CUDA toolkit")
    _, cubin = _run(["-cubin", f"-arch={arch}"], source, ".cubin")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        res = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(f"cuobjdump -sass failed: {res.stderr[-2000:]}")
    return res.stdout
