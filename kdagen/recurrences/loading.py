"""A recurrence named on the command line: `path/to/file.py:fn` or `package.module:fn`.

`fn` is either a function fn(r, **options) that writes a recurrence into a fresh kdagen.dsl.Recurrence (as
kdagen.dsl.build calls it) or a Recurrence object. The file is imported under a private module name, so it
may import anything its directory or sys.path offers.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path

from kdagen import dsl


def _module(where: str, label: str):
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise ValueError(f"{label}: no file {where}")
        spec = importlib.util.spec_from_file_location(f"kdagen_user_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(where)
    except ImportError as e:
        raise ValueError(f"{label}: cannot import module {where!r} ({e})") from None


def load_recurrence(ref: str, options: dict | None = None, label: str = "--recurrence") -> dsl.Recurrence:
    """The checked recurrence `ref` ("file.py:fn" or "module:fn") names, built with `options`."""
    where, sep, attr = ref.rpartition(":")
    if not sep or not where or not attr.isidentifier():
        raise ValueError(f"{label} {ref!r}: write FILE.py:FUNCTION or MODULE:FUNCTION")
    module = _module(where, label)
    obj = getattr(module, attr, None)
    if obj is None:
        raise ValueError(f"{label}: {where} has no {attr!r}")
    options = dict(options or {})
    if isinstance(obj, dsl.Recurrence):
        if options:
            raise ValueError(f"{label}: {attr} is a built Recurrence; options {sorted(options)} need a function")
        return obj.check()
    if not callable(obj):
        raise ValueError(f"{label}: {attr} is a {type(obj).__name__}, not a function or a kdagen.dsl.Recurrence")
    try:
        inspect.signature(obj).bind(None, **options)
    except TypeError as e:
        raise ValueError(f"{label}: {attr}{inspect.signature(obj)} does not take these options: {e}") from None
    return dsl.build(obj, **options)
