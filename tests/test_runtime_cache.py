"""The on-disk cache: hits, misses, corrupt entries rebuilt, atomic writes, concurrent processes on one key, and a
cache that cannot be written (read-only, a folder at an entry's path) costing a compile rather than the call."""
from __future__ import annotations

import errno
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from kdagen.runtime import UnsupportedArchError, cache, fetch_image, loader
from markers import needs_nvrtc

IMAGE = b"\x7fELF" + bytes(range(256)) * 4


@pytest.fixture(autouse=True)
def jit_allowed(monkeypatch):
    monkeypatch.delenv("KDAGEN_DISABLE_JIT", raising=False)


def counting_build(calls: list, image: bytes = IMAGE):
    def build():
        calls.append(1)
        return image
    return build


def test_miss_builds_then_hit_reads(tmp_path):
    path, calls = tmp_path / "sm_90a" / "u" / "k.cubin", []
    assert cache.fetch(path, counting_build(calls)) == (IMAGE, "built")
    assert cache.fetch(path, counting_build(calls)) == (IMAGE, "disk")
    assert len(calls) == 1
    assert cache.unpack(path.read_bytes()) == IMAGE


def test_rebuild_forces_a_compile(tmp_path):
    path, calls = tmp_path / "k.cubin", []
    cache.fetch(path, counting_build(calls))
    assert cache.fetch(path, counting_build(calls, IMAGE + b"new"), rebuild=True) == (IMAGE + b"new", "built")
    assert cache.read(path) == IMAGE + b"new" and len(calls) == 2


@pytest.mark.parametrize("damage", [
    lambda blob: blob[:-10],                                   # truncated image
    lambda blob: blob[:20],                                    # truncated header
    lambda blob: blob[:-1] + bytes([blob[-1] ^ 0xFF]),         # one flipped byte
    lambda blob: b"",                                          # empty file
    lambda blob: IMAGE,                                        # a bare cubin without our header
])
def test_corrupt_entry_is_rebuilt_not_trusted(tmp_path, damage, monkeypatch, capsys):
    monkeypatch.setenv("KDAGEN_VERBOSE", "1")
    path, calls = tmp_path / "k.cubin", []
    cache.fetch(path, counting_build(calls))
    path.write_bytes(damage(path.read_bytes()))
    assert cache.read(path) is None
    assert cache.fetch(path, counting_build(calls)) == (IMAGE, "built")
    assert len(calls) == 2 and cache.read(path) == IMAGE
    assert "corrupt cache entry" in capsys.readouterr().err


def test_disable_jit_refuses_to_build(tmp_path, monkeypatch):
    monkeypatch.setenv("KDAGEN_DISABLE_JIT", "1")
    calls = []
    with pytest.raises(cache.JitDisabledError, match="KDAGEN_DISABLE_JIT"):
        cache.fetch(tmp_path / "k.cubin", counting_build(calls))
    assert calls == []


def test_atomic_write_leaves_old_file_or_nothing_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "d" / "k.cubin"
    cache.atomic_write(path, b"old")

    def crash(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        cache.atomic_write(path, b"new contents")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in path.parent.iterdir()) == ["k.cubin"]      # no temporary file left behind


def test_atomic_write_renames_a_complete_temporary_file(tmp_path, monkeypatch):
    path, seen = tmp_path / "k.cubin", []
    real = os.replace

    def spy(src, dst):
        seen.append((Path(src).parent, Path(src).read_bytes(), Path(dst)))
        real(src, dst)
    monkeypatch.setattr(os, "replace", spy)
    cache.atomic_write(path, b"payload")
    [(src_dir, written, dst)] = seen
    assert src_dir == tmp_path and written == b"payload" and dst == path      # same directory: rename is atomic


def _race(path: str, log: str, barrier, results) -> None:
    """One process: wait for the others, then fetch the same key with a slow build that logs each call."""
    def build():
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.3)
        return IMAGE
    barrier.wait()
    image, how = cache.fetch(Path(path), build)
    results.put((os.getpid(), image == IMAGE, how))


def test_concurrent_processes_compile_a_key_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    n = 4
    barrier, results = ctx.Barrier(n), ctx.Queue()
    path, log = tmp_path / "sm_90a" / "race" / "k.cubin", tmp_path / "builds.log"
    procs = [ctx.Process(target=_race, args=(str(path), str(log), barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    outcomes = [results.get(timeout=5) for _ in range(n)]
    assert all(ok for _, ok, _ in outcomes)
    assert sorted(how for _, _, how in outcomes) == ["built"] + ["disk"] * (n - 1)
    assert len(log.read_text().split()) == 1
    assert cache.read(path) == IMAGE
    assert not list(path.parent.glob("*.tmp"))


def test_entries_and_clear(tmp_path):
    for arch, uri in [("sm_90a", "kda_a"), ("sm_80", "kda_a"), ("sm_90a", "gdn_b")]:
        cache.fetch(cache.Entry(arch, uri, "0123", "cubin").path(tmp_path), lambda: IMAGE)
    bad = cache.Entry("sm_90a", "gdn_b", "4567", "cubin").path(tmp_path)
    bad.write_bytes(b"junk")
    listed = cache.entries(tmp_path)
    assert [(e.arch, e.uri, e.intact) for e in listed] == [
        ("sm_80", "kda_a", True), ("sm_90a", "gdn_b", True), ("sm_90a", "gdn_b", False), ("sm_90a", "kda_a", True)]
    for name in ("kda_a/forward.cu", "gdn_b/forward.cu", "gdn_b.cu"):          # KDAGEN_LINEINFO's kept sources
        (tmp_path / "source" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "source" / name).write_text("//")
    assert cache.clear(tmp_path, "kda") == 2
    assert {e.uri for e in cache.entries(tmp_path)} == {"gdn_b"}
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.cu")) == ["source/gdn_b.cu",
                                                                                      "source/gdn_b/forward.cu"]
    assert cache.clear(tmp_path) == 2 and cache.entries(tmp_path) == []
    assert list((tmp_path / "source").iterdir()) == []


def test_a_read_only_cache_reads_its_entries_and_compiles_the_rest_in_memory(tmp_path, monkeypatch, read_only,
                                                                            warned_afresh):
    monkeypatch.setenv("KDAGEN_CACHE_DIR", str(tmp_path))
    cached = cache.Entry("sm_80", "kda_a", "0123", "cubin").path(tmp_path)
    cache.fetch(cached, lambda: IMAGE)
    read_only(tmp_path)
    calls = []
    with pytest.warns(RuntimeWarning) as warned:
        assert cache.fetch(cached, counting_build(calls)) == (IMAGE, "disk")
        for uri, key in [("kda_a", "4567"), ("gdn_b", "89ab")]:       # an entry folder that exists, one that does not
            path = cache.Entry("sm_80", uri, key, "cubin").path(tmp_path)
            assert cache.fetch(path, counting_build(calls)) == (IMAGE, "memory") and not path.exists()
    assert len(calls) == 2
    [message] = [str(w.message) for w in warned]                               # once, not once per entry
    assert f"kernel cache {tmp_path} " in message and os.strerror(errno.EROFS) in message
    monkeypatch.setenv("KDAGEN_DISABLE_JIT", "1")
    with pytest.raises(cache.JitDisabledError):
        cache.fetch(cache.Entry("sm_80", "gdn_b", "cdef", "cubin").path(tmp_path), counting_build(calls))


def test_an_entry_path_that_is_a_folder_costs_a_compile_not_the_call(tmp_path, monkeypatch, warned_afresh):
    monkeypatch.setenv("KDAGEN_CACHE_DIR", str(tmp_path))
    path = cache.Entry("sm_90a", "kda_a", "0123", "cubin").path(tmp_path)
    (path / "stray").mkdir(parents=True)
    assert cache.read(path) is None
    with pytest.warns(RuntimeWarning, match="Is a directory"):
        assert cache.fetch(path, counting_build([])) == (IMAGE, "memory")
    assert path.is_dir() and not list(path.parent.glob("*.tmp"))


@needs_nvrtc
def test_fetch_image_refuses_an_arch_name_the_cache_does_not_use(tmp_path, monkeypatch):
    monkeypatch.setenv("KDAGEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(loader, "compile_source", lambda *a, **k: pytest.fail("compiled for an unknown arch name"))
    with pytest.raises(UnsupportedArchError, match="'sm_90'"):
        fetch_image("tiny", 'extern "C" __global__ void k() {}', "sm_90")
    assert not (tmp_path / "sm_90").exists()
