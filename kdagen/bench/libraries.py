"""The two implementations under test, found at run time, or the reason one cannot be used.

A missing library is data, not an exception: its cells read "n/a" with the reason, so either one
can be measured alone.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from importlib import metadata
from typing import Callable

from .cases import FUNCTIONS

NAMES = ("kdagen", "fla")
TITLES = {"kdagen": "kdagen", "fla": "FLA"}
FLA_MODULES = {"chunk_kda": "fla.ops.kda", "chunk_gated_delta_rule": "fla.ops.gated_delta_rule"}


@dataclass(frozen=True)
class Library:
    name: str
    functions: dict[str, Callable] = field(default_factory=dict)
    reason: str | None = None       # why the whole library is unavailable; None when usable
    version: str | None = None
    missing: dict[str, str] = field(default_factory=dict)   # function -> the error that looking it up raised

    @property
    def available(self) -> bool:
        return self.reason is None

    def unavailable(self, function: str) -> str | None:
        """Why `function` cannot be called here, or None."""
        if self.reason or function in self.functions:
            return self.reason
        why = f" ({self.missing[function]})" if function in self.missing else ""
        return f"{TITLES[self.name]} has no {function}{why}"

    @property
    def failure_prefix(self) -> str:
        """How a raised error is reported in a cell (FLA refusing a config is a normal outcome)."""
        return "refused by FLA" if self.name == "fla" else "raised by kdagen"

    def describe(self) -> dict:
        return {"available": self.available, "reason": self.reason, "version": self.version,
                "missing": self.missing}


def installed_version(*dists: str) -> str | None:
    """The version of the first of these distributions that is installed."""
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def error_text(e: BaseException) -> str:
    """One line for a table cell: the exception type and the first line of its message."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def collect(name: str, lookup: Callable[[str], Callable], title: str, version: str | None) -> Library:
    """The functions `lookup` finds; the library is unavailable only when it finds none."""
    functions, missing = {}, {}
    for function in FUNCTIONS:
        try:
            functions[function] = lookup(function)
        except Exception as e:  # an import-time failure of a library under test is a reason, not a crash
            missing[function] = error_text(e)
    if not functions:
        return Library(name, reason=f"{title} unavailable ({next(iter(missing.values()))})")
    return Library(name, functions, version=version, missing=missing)


def load_kdagen() -> Library:
    return collect("kdagen", lambda f: getattr(importlib.import_module("kdagen"), f), "kdagen ops",
                   installed_version("kdagen"))


def load_fla() -> Library:
    return collect("fla", lambda f: getattr(importlib.import_module(FLA_MODULES[f]), f), "flash-linear-attention",
                   installed_version("flash-linear-attention", "fla-core"))


LOADERS = {"kdagen": load_kdagen, "fla": load_fla}


def load(requested) -> dict[str, Library]:
    """Every library by name; the ones not requested carry that as their reason."""
    out = {}
    for name in NAMES:
        if name in requested:
            out[name] = LOADERS[name]()
        else:
            out[name] = Library(name, reason=f"not requested (--libs {','.join(requested)})")
    return out
