"""The KDAGEN_* environment variables, read at each call so a test or a user can change them at run time.

KDAGEN_CACHE_DIR   cubin cache root (default $XDG_CACHE_HOME/kdagen, i.e. ~/.cache/kdagen); the CPU emulator
                   keeps its host builds in emulate/ there
KDAGEN_ARCH        compile for this arch instead of the device's (sm_90a | sm_80); works without a GPU
KDAGEN_DISABLE_JIT 1: never compile; a kernel missing from the cache is an error
KDAGEN_VERBOSE     1: print kdagen's log (compiles, cache reads, NVRTC logs) on stderr; the same records always go
                   to logging.getLogger("kdagen") at INFO, for an application's own logging setup
KDAGEN_DEBUG       1: the CLI shows tracebacks instead of one-line errors
KDAGEN_POISON      1: every kernel output and workspace is filled with NaN before launch (a kernel that skips a
                   write shows up; the GPU tests set it)
KDAGEN_PRECOMPILE  configurations to compile when kdagen is imported, separated by ';' (`kdagen compile --help`);
                   one that does not parse is reported with a warning, not an import error
KDAGEN_LINEINFO    1: compile with line information (--generate-line-info) and keep each unit's generated source
                   under source/ in the cache root, by the name its `#line` directives give the lines emitted from
                   Python, for a profiler's source view (docs/environment.md)
KDAGEN_FAMILY      a kernel family to use instead of the planner's choice (`kdagen plan` lists them)
KDAGEN_SEGMENTS    sequence parallelism inside one GPU (docs/segments.md): off (default), auto (cuts nothing on
                   today's kernels, measured slower at every shape) or tokens per segment
KDAGEN_CUT         an inference forward cut into segments on the family's own kernels (docs/segments.md §4-5):
                   auto (default: where the planner's cost model says it pays), off, or tokens per segment (a
                   multiple of 64)
"""
from __future__ import annotations

import logging
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


def poison() -> bool:
    return flag("KDAGEN_POISON")


def lineinfo() -> bool:
    return flag("KDAGEN_LINEINFO")


def _tokens(name: str, unset: str, multiple: int = 1) -> int | str:
    """A setting of off, auto or a positive number of tokens (a multiple of `multiple`); `unset` when empty;
    anything else is an error naming the variable."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if not value:
        return unset
    if value == "auto":
        return "auto"
    if value in _FALSE:
        return "off"
    if value.isascii() and value.isdigit() and int(value) > 0 and int(value) % multiple == 0:
        return int(value)
    whole = f" (a multiple of {multiple})" if multiple > 1 else ""
    raise ValueError(f"{name}={raw!r}: expected off, auto or a positive number of tokens{whole}")


def segments() -> str:
    """KDAGEN_SEGMENTS as "off" (also when unset), "auto" or a number of tokens (as text)."""
    return str(_tokens("KDAGEN_SEGMENTS", "off"))


def cut() -> int | str:
    """KDAGEN_CUT as "auto" (also when unset), "off", or tokens per segment: a multiple of the 64-token chunk."""
    return _tokens("KDAGEN_CUT", "auto", multiple=64)


def precompile_list() -> list[str]:
    return [c.strip() for c in os.environ.get("KDAGEN_PRECOMPILE", "").split(";") if c.strip()]


class _Stderr(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a record comes (a redirected or captured stderr included)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _):
        pass


LOG = logging.getLogger("kdagen")
_STDERR = _Stderr()
_STDERR.setFormatter(logging.Formatter("[kdagen] %(message)s"))


def note(message: str, level: int = logging.INFO) -> None:
    """A record on logging.getLogger("kdagen"); with KDAGEN_VERBOSE=1 also on stderr (whatever the application's
    logging setup)."""
    if verbose():
        if _STDERR not in LOG.handlers:
            LOG.addHandler(_STDERR)
        if LOG.getEffectiveLevel() > level:
            LOG.setLevel(level)
    elif _STDERR in LOG.handlers:
        LOG.removeHandler(_STDERR)
    LOG.log(level, message)
