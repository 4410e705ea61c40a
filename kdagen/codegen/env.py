"""The Jinja2 environment every kernel template renders in: StrictUndefined, so a name the
template uses and the context lacks is an error, never an empty string."""
from __future__ import annotations

import functools

import jinja2

from ..paths import templates_dir


@functools.cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def template_exists(name: str) -> bool:
    return (templates_dir() / name).is_file()
