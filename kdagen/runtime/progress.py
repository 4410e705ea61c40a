"""A dependency-free progress bar for compiles (`kdagen compile`, KDAGEN_PRECOMPILE at import).

On a terminal it redraws one line; elsewhere (CI logs, pipes) it prints one line per step.
"""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str, stream=None, width: int = 24):
        self.total, self.label, self.width = total, label, width
        self.stream = sys.stderr if stream is None else stream
        self.done, self.start = 0, time.perf_counter()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def advance(self, what: str = "") -> None:
        self.done += 1
        filled = self.width * self.done // max(self.total, 1)
        line = (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} "
                f"{time.perf_counter() - self.start:.1f}s {what}")
        if self.tty:
            self.stream.write("\r\033[K" + line + ("\n" if self.done == self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
