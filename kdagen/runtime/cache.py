"""The on-disk cache of compiled kernel images, safe for concurrent processes.

Layout: <KDAGEN_CACHE_DIR>/<arch>/<uri>/<key>.<kind>, one file per compiled image, where key
hashes everything the image depends on (source, arch, options, kdagen, NVRTC and CuPy versions).
Each file is MAGIC + sha256(image) + image: a truncated or damaged entry fails the check and is
rebuilt instead of being handed to the driver. Writes go to a temporary file in the same
directory and are renamed into place (atomic on POSIX), under a per-entry file lock so that
processes racing on one key compile it once.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from filelock import FileLock

from . import env

MAGIC = b"KDAGEN-IMAGE-1\n"
_DIGEST_LEN = 64
KINDS = ("cubin", "ptx")


class JitDisabledError(RuntimeError):
    """KDAGEN_DISABLE_JIT is set and the cache lacks the kernel."""


@dataclass(frozen=True)
class Entry:
    arch: str
    uri: str
    key: str
    kind: str

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
    """The cached image at path; None when absent or corrupt (noted, so that a rebuild is explained)."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
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
    """(image, 'disk' | 'built'): read the entry, else build it once under the entry's lock.

    The second read under the lock is what makes racing processes compile once: the losers find
    the winner's entry. `rebuild` forces a compile (used to time cold compiles).
    """
    if not rebuild and (image := read(path)) is not None:
        return image, "disk"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not rebuild and (image := read(path)) is not None:
            return image, "disk"
        if env.jit_disabled():
            raise JitDisabledError(f"KDAGEN_DISABLE_JIT is set and {path} is not in the cache; "
                                   f"run `kdagen compile` for this configuration or unset KDAGEN_DISABLE_JIT")
        env.note(f"compiling {path.parent.name} for {path.parent.parent.name} (first use; cached in {path.parent})")
        start = time.perf_counter()
        image = build()
        atomic_write(path, pack(image))
        env.note(f"compiled {path.parent.name} ({path.parent.parent.name}) in {time.perf_counter() - start:.2f} s")
        return image, "built"


@dataclass(frozen=True)
class Listed:
    path: Path
    arch: str
    uri: str
    bytes: int
    mtime: float
    intact: bool


def entries(root: Path) -> list[Listed]:
    """Every image under root, sorted by arch then uri."""
    found = []
    for kind in KINDS:
        for p in root.glob(f"*/*/*.{kind}"):
            st = p.stat()
            found.append(Listed(p, p.parent.parent.name, p.parent.name, st.st_size, st.st_mtime,
                                unpack(p.read_bytes()) is not None))
    return sorted(found, key=lambda e: (e.arch, e.uri, e.path.name))


def clear(root: Path, uri_contains: str | None = None) -> int:
    """Delete images (and their lock files) whose uri contains the text, or all; returns how many images."""
    removed = 0
    for e in entries(root):
        if uri_contains is None or uri_contains in e.uri:
            e.path.unlink(missing_ok=True)
            Path(str(e.path) + ".lock").unlink(missing_ok=True)
            removed += 1
            if not any(e.path.parent.iterdir()):
                e.path.parent.rmdir()
    return removed
