"""Where each line of a rendered unit comes from, as `#line` directives: compiler errors, ptxas remarks and
profiler source views then point at the template line (or the header line) that produced the code, not at
a generated file marked "do not edit".

Rendering works on marked sources: `mark_template` prefixes every template line that starts outside a
Jinja tag with an invisible marker naming the file and line (`\\x01file:line\\x02`); `mark_text` does the
same for verbatim text (the common headers). `resolve` turns the rendered text's markers into directives,
one wherever the compiler's own line count would go wrong: after a Jinja statement dropped a line, at a
macro's output, around text emitted from Python (the DSL blocks, the shared-memory carve-out), which is
attributed to the unit itself.
"""
from __future__ import annotations

import re

_MARK = re.compile(r"\x01([^\x01\x02:]+):(\d+)\x02")
_TAG = re.compile(r"\{\{|\}\}|\{%|%\}|\{#|#\}|\n")
_CLOSE = {"{{": "}}", "{%": "%}", "{#": "#}"}
_PLACES = re.compile(r"\s*\{\{.*\}\}\s*")        # a line that only places text: the text brings its origin


def marker(path: str, line: int) -> str:
    return f"\x01{path}:{line}\x02"


def mark_template(source: str, path: str) -> str:
    """Prefix each line that starts outside a tag with its marker, except statement and comment lines and lines
    that only place text (`{{ block }}`: macro output carries its own markers, text from Python has none and
    is attributed to the unit)."""
    starts_in_text, state, line = [], None, 0
    starts_in_text.append(True)
    for m in _TAG.finditer(source):
        tok = m.group(0)
        if tok == "\n":
            starts_in_text.append(state is None)
        elif state is None and tok in _CLOSE:
            state = _CLOSE[tok]
        elif tok == state:
            state = None
    out = []
    for line, (text, free) in enumerate(zip(source.split("\n"), starts_in_text), start=1):
        stripped = text.lstrip()
        plain = free and not stripped.startswith(("{%", "{#")) and not _PLACES.fullmatch(text)
        out.append(marker(path, line) + text if plain and stripped else text)
    return "\n".join(out)


def mark_text(text: str, path: str) -> str:
    """Every line of verbatim text marked with its own line number."""
    return "\n".join(marker(path, i) + t if t.strip() else t for i, t in enumerate(text.split("\n"), start=1))


def without_directives(text: str) -> str:
    """A resolved text without its `#line` directives (to read or compare code alone)."""
    return "\n".join(line for line in text.split("\n") if not line.startswith("#line "))


def resolve(text: str, unit: str) -> str:
    """The markers of a rendered text as `#line` directives; unmarked lines keep their place in `unit`."""
    out: list[str] = []
    expect = (unit, 1)
    for raw in text.split("\n"):
        m = _MARK.search(raw)
        line = _MARK.sub("", raw)
        if m is None and not line.strip():
            origin = expect                      # a blank line never needs a directive
        else:
            origin = (m.group(1), int(m.group(2))) if m else (unit, len(out) + 1)
        if origin != expect:
            if origin[0] == unit:
                origin = (unit, len(out) + 2)    # the directive takes this line's place
            out.append(f'#line {origin[1]} "{origin[0]}"')
        out.append(line)
        expect = (origin[0], origin[1] + 1)
    return "\n".join(out)
