"""The KDAGEN_* environment variables, read at each call so a test or a user can change them at run time.

KDAGEN_CACHE_DIR   cubin cache root (default $XDG_CACHE_HOME/kdagen, i.e. ~/.cache/kdagen)
KDAGEN_ARCH        compile for this arch instead of the device's (sm_90a | sm_80); works without a GPU
KDAGEN_DISABLE_JIT 1: never compile; a kernel missing from the cache is an error
KDAGEN_VERBOSE     1: report compiles, cache hits and NVRTC logs on stderr
KDAGEN_DEBUG       1: the CLI shows tracebacks instead of one-line errors, and every kernel output and
                   workspace is filled with NaN before launch (a kernel that skips a write shows up)
KDAGEN_PRECOMPILE  configurations to compile when kdagen is imported, separated by ';' (`kdagen compile --help`)
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def flag(name: str) -> bool:
    """A 0/1 switch; anything else is an error naming the variable (a typo must not silently mean 'off')."""
    value = os.environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name}={os.environ[name]!r}: expected 0 or 1")


def cache_dir() -> Path:
    explicit = os.environ.get("KDAGEN_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "kdagen"


def arch_override() -> str | None:
    return os.environ.get("KDAGEN_ARCH", "").strip() or None


def jit_disabled() -> bool:
    return flag("KDAGEN_DISABLE_JIT")


def verbose() -> bool:
    return flag("KDAGEN_VERBOSE")


def debug() -> bool:
    return flag("KDAGEN_DEBUG")


def precompile_list() -> list[str]:
    return [c.strip() for c in os.environ.get("KDAGEN_PRECOMPILE", "").split(";") if c.strip()]


def note(message: str) -> None:
    """One line on stderr when KDAGEN_VERBOSE is set."""
    if verbose():
        print(f"[kdagen] {message}", file=sys.stderr, flush=True)
