"""Shared by the tests: tests/ on sys.path (so the GPU tests under tests/gpu/ import the helpers beside them,
e.g. backward_cases.py, however pytest is started) and the `seed` fixture."""
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
