"""The on-disk cache of compiled kernel images, safe for concurrent processes.

Layout: <KDAGEN_CACHE_DIR>/<arch>/<uri>/<key>.<kind>, one file per compiled image, where key
hashes everything the image depends on (source, arch, options, kdagen, NVRTC and CuPy versions).
Each file is MAGIC + sha256(image) + image: a truncated or damaged entry fails the check and is
rebuilt instead of being handed to the driver. Writes go to a temporary file in the same
directory and are renamed into place (atomic on POSIX), under a per-entry file lock so that
processes racing on one key compile it once. A cache that cannot take an entry (read-only, a
file where a folder should be, full) costs a compile, never the call: the image is used from
memory and a warning says so once.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from filelock import FileLock

from . import env
from .arch import ARCHES, UnsupportedArchError

MAGIC = b"KDAGEN-IMAGE-1\n"
_DIGEST_LEN = 64
KINDS = ("cubin", "ptx")


class JitDisabledError(RuntimeError):
    """KDAGEN_DISABLE_JIT is set and the cache lacks the kernel."""


class CacheNotWritableError(RuntimeError):
    """The cache folder cannot take new entries, and filling it is what was asked (`kdagen compile`)."""


@dataclass(frozen=True)
class Entry:
    arch: str
    uri: str
    key: str
    kind: str

    def __post_init__(self):
        """Only the arch names kdagen loads with (arch.ARCHES): another spelling ('90a', 'sm_90') would fill
        the cache with images no load finds."""
        if self.arch not in ARCHES:
            raise UnsupportedArchError(f"cache entry for arch {self.arch!r}: expected one of {', '.join(ARCHES)} "
                                       "(runtime.normalize_arch gives the name of an alias)")
        if self.kind not in KINDS:
            raise ValueError(f"cache entry of kind {self.kind!r}: expected one of {', '.join(KINDS)}")

    def path(self, root: Path) -> Path:
        return root / self.arch / self.uri / f"{self.key}.{self.kind}"


def entry_key(source: str, arch: str, kind: str, options, versions: dict) -> str:
    """Hash of what the image depends on; `versions` names the tools (kdagen, nvrtc, cupy)."""
    blob = json.dumps({"arch": arch, "kind": kind, "options": list(options), "versions": versions,
                       "source": source}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def pack(image: bytes) -> bytes:
    return MAGIC + hashlib.sha256(image).hexdigest().encode() + b"\n" + image


def unpack(blob: bytes) -> bytes | None:
    """The image, or None when the blob is not a whole, intact entry."""
    head = len(MAGIC) + _DIGEST_LEN + 1
    if len(blob) <= head or not blob.startswith(MAGIC) or blob[head - 1:head] != b"\n":
        return None
    image = blob[head:]
    digest = blob[len(MAGIC):head - 1]
    return image if hashlib.sha256(image).hexdigest().encode() == digest else None


def read(path: Path) -> bytes | None:
    """The cached image at path; None when absent, unreadable or corrupt (noted, so that a rebuild is explained)."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        env.note(f"cannot read cache entry {path} ({e}); compiling it")
        return None
    image = unpack(blob)
    if image is None:
        env.note(f"corrupt cache entry {path} ({len(blob)} bytes); rebuilding it")
    return image


def atomic_write(path: Path, data: bytes) -> None:
    """Readers see the old file or the whole new one, never a partial write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def fetch(path: Path, build: Callable[[], bytes], *, rebuild: bool = False) -> tuple[bytes, str]:
    """(image, 'disk' | 'built' | 'memory'): read the entry, else build it once under the entry's lock;
    'memory' when the cache could not store what was built.

    The second read under the lock is what makes racing processes compile once: the losers find
    the winner's entry. `rebuild` forces a compile (used to time cold compiles).
    """
    if not rebuild and (image := read(path)) is not None:
        return image, "disk"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock")
        lock.acquire()
    except OSError as e:
        image = _build(path, build)
        _not_stored(path, e)
        return image, "memory"
    try:
        if not rebuild and (image := read(path)) is not None:
            return image, "disk"
        image = _build(path, build)
        try:
            for orphan in path.parent.glob(f".{path.name}.*.tmp"):   # of a writer killed mid-write: we hold the lock
                orphan.unlink(missing_ok=True)
            atomic_write(path, pack(image))
        except OSError as e:
            _not_stored(path, e)
            return image, "memory"
        return image, "built"
    finally:
        lock.release()


def _build(path: Path, build: Callable[[], bytes]) -> bytes:
    """The compile of a missing entry: refused under KDAGEN_DISABLE_JIT, logged with its time."""
    if env.jit_disabled():
        raise JitDisabledError(f"KDAGEN_DISABLE_JIT is set and {path} is not in the cache; "
                               f"run `kdagen compile` for this configuration or unset KDAGEN_DISABLE_JIT")
    env.note(f"compiling {path.parent.name} for {path.parent.parent.name} (first use; cached in {path.parent})")
    start = time.perf_counter()
    image = build()
    env.note(f"compiled {path.parent.name} ({path.parent.parent.name}) in {time.perf_counter() - start:.2f} s")
    return image


_warned_not_writable: set[Path] = set()


def _not_stored(path: Path, error: OSError) -> None:
    """Every process now compiles what it uses again: noted per entry, and a warning once per cache folder."""
    env.note(f"cannot store {path} ({error}); using the image compiled in memory")
    root = env.cache_dir()
    if root not in _warned_not_writable:
        _warned_not_writable.add(root)
        warnings.warn(f"kdagen cannot write its kernel cache {root} ({error}); kernels are compiled in memory, "
                      "again in every process. Set KDAGEN_CACHE_DIR to a writable folder", RuntimeWarning)


def check_writable(root: Path) -> None:
    """CacheNotWritableError unless a file can be created (and removed) in root: asked before compiling for the
    cache, so that a cache that cannot take the images fails at once, not after the compiles."""
    try:
        _check_folder(root)
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=root, prefix=".probe.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise CacheNotWritableError(f"cannot fill the kernel cache: {e}; set KDAGEN_CACHE_DIR to a writable folder"
                                    ) from None


def _check_folder(root: Path) -> None:
    if root.exists() and not root.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "the kernel cache is not a folder", str(root))


@dataclass(frozen=True)
class Listed:
    path: Path
    arch: str
    uri: str
    bytes: int
    mtime: float
    intact: bool


def entries(root: Path) -> list[Listed]:
    """Every image under root, sorted by arch then uri; none when root does not exist, NotADirectoryError when
    it is not a folder (listing nothing there would read as an empty cache)."""
    _check_folder(root)
    found = []
    for kind in KINDS:
        for p in root.glob(f"*/*/*.{kind}"):
            st = p.stat()
            found.append(Listed(p, p.parent.parent.name, p.parent.name, st.st_size, st.st_mtime,
                                unpack(p.read_bytes()) is not None))
    return sorted(found, key=lambda e: (e.arch, e.uri, e.path.name))


def clear(root: Path, uri_contains: str | None = None) -> int:
    """Delete images (and their lock files) whose uri contains the text, or all, and likewise the sources
    KDAGEN_LINEINFO kept under source/; returns how many images."""
    removed = 0
    for e in entries(root):
        if uri_contains is None or uri_contains in e.uri:
            e.path.unlink(missing_ok=True)
            Path(str(e.path) + ".lock").unlink(missing_ok=True)
            removed += 1
            if not any(e.path.parent.iterdir()):
                e.path.parent.rmdir()
    kept = root / "source"
    for p in sorted(kept.rglob("*.cu"), reverse=True) if kept.is_dir() else []:
        if uri_contains is None or uri_contains in str(p.relative_to(kept)):
            p.unlink()
            for folder in p.relative_to(kept).parents[:-1]:     # its folders below source/, once empty
                if not any((kept / folder).iterdir()):
                    (kept / folder).rmdir()
    return removed
