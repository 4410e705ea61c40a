"""`kdagen env`: versions, GPUs and their arch, the cache, and the KDAGEN_* settings (for bug reports)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys

EXAMPLE = """example:
  kdagen env            # readable report
  kdagen env --json     # the same as JSON, for bug reports"""


def _probe(fn):
    """fn(), or the reason it failed: one missing piece must not hide the rest of the report."""
    try:
        return fn()
    except Exception as e:
        return f"unavailable ({type(e).__name__}: {e})"


def _devices() -> list[dict] | str:
    import torch

    from ..runtime import arch_for_capability
    if not torch.cuda.is_available():
        return "none visible"
    found = []
    for i in range(torch.cuda.device_count()):
        cc = torch.cuda.get_device_capability(i)
        found.append({"index": i, "name": torch.cuda.get_device_name(i), "capability": f"{cc[0]}.{cc[1]}",
                      "arch": _probe(lambda: arch_for_capability(cc))})
    return found


def _cache() -> dict:
    from ..runtime import cache, cache_dir
    root = cache_dir()
    listed = cache.entries(root)
    return {"dir": str(root), "images": len(listed), "bytes": sum(e.bytes for e in listed)}


def environment() -> dict:
    import torch

    from .. import __version__
    from ..runtime import cuda_include_dir, detect_arch, versions
    return {
        "kdagen": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda or "none (CPU build)",
        "cupy": _probe(lambda: versions()["cupy"]),
        "compiler": _probe(lambda: versions()["compiler"]),
        "cuda_include": _probe(lambda: str(cuda_include_dir())),
        "nvcc": shutil.which("nvcc") or "not on PATH",
        "devices": _probe(_devices),
        "arch": _probe(detect_arch),
        "cache": _probe(_cache),
        "settings": {k: v for k, v in sorted(os.environ.items()) if k.startswith("KDAGEN_")},
    }


def _print(report: dict) -> None:
    width = max(map(len, report))
    for key, value in report.items():
        if isinstance(value, list):
            print(f"{key:<{width}}  {len(value)}")
            for item in value:
                print(f"{'':<{width}}    " + ", ".join(f"{k}={v}" for k, v in item.items()))
        elif isinstance(value, dict):
            print(f"{key:<{width}}  " + (", ".join(f"{k}={v}" for k, v in value.items()) or "(none)"))
        else:
            print(f"{key:<{width}}  {value}")


def run(args) -> int:
    report = environment()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("env", help="versions, GPUs and arch, cache dir, KDAGEN_* settings",
                              description=__doc__, epilog=EXAMPLE,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)
