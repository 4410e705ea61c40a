"""Markers shared by test files (tests/ is on sys.path through conftest.py)."""
import pytest

from kdagen import runtime


def _nvrtc_ready() -> bool:
    try:
        runtime.versions()
        runtime.cuda_include_dir()
        return True
    except Exception:
        return False


needs_nvrtc = pytest.mark.skipif(not _nvrtc_ready(), reason="CuPy's NVRTC or the CUDA headers are not available")
