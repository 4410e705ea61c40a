"""Shared by the tests: tests/ on sys.path (so the GPU tests under tests/gpu/ import the helpers beside them,
e.g. backward_cases.py, however pytest is started), the `seed` fixture, and the read-only cache fixtures
(`read_only`, `warned_afresh`) the cache and CLI tests share."""
import errno
import io
import os
import random
import sys
from pathlib import Path

import pytest

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture
def seed() -> int:
    """Fresh inputs every run; a failure message prints the seed and KDAGEN_TEST_SEED=<seed> reproduces it."""
    return int(os.environ.get("KDAGEN_TEST_SEED") or random.SystemRandom().randrange(2 ** 31))


@pytest.fixture
def read_only(monkeypatch):
    """make(folder): from then on this process writes nothing under folder, as on a read-only mount (EROFS).
    Simulated at the os layer because permission bits do not stop root, which CI may run as."""
    roots: list[str] = []

    def guard(fn, written):
        def checked(*args, **kwargs):
            for path in written(*args, **kwargs):
                full = os.path.abspath(os.fspath(path))
                if any(full == r or full.startswith(r + os.sep) for r in roots):
                    raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
            return fn(*args, **kwargs)
        return checked

    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC
    monkeypatch.setattr(os, "open", guard(os.open, lambda path, flags, *a, **k: [path] if flags & writes else []))
    monkeypatch.setattr(io, "open", guard(io.open, lambda file, mode="r", *a, **k:
                                          [file] if set(mode) & set("wax+") and not isinstance(file, int) else []))
    for name in ("mkdir", "rmdir", "unlink", "remove"):
        monkeypatch.setattr(os, name, guard(getattr(os, name), lambda path, *a, **k: [path]))
    for name in ("replace", "rename"):
        monkeypatch.setattr(os, name, guard(getattr(os, name), lambda src, dst, *a, **k: [src, dst]))
    return lambda folder: roots.append(os.path.abspath(folder))


@pytest.fixture
def warned_afresh(monkeypatch):
    """The once-per-process warning about an unwritable cache, as in a new process."""
    from kdagen.runtime import cache
    monkeypatch.setattr(cache, "_warned_not_writable", set())
