"""The Jinja2 environment every kernel template renders in: StrictUndefined, so a name the
template uses and the context lacks is an error, never an empty string. Its loader marks each line with
its template and line number (kdagen.codegen.lines), which rendering turns into `#line` directives."""
from __future__ import annotations

import functools

import jinja2

from ..paths import templates_dir
from .lines import mark_template


class MarkingLoader(jinja2.FileSystemLoader):
    """Templates as files under templates/, each line marked with "templates/<name>:<line>"."""

    def get_source(self, environment, template):
        source, filename, uptodate = super().get_source(environment, template)
        return mark_template(source, f"templates/{template}"), filename, uptodate


@functools.cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=MarkingLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def template_exists(name: str) -> bool:
    return (templates_dir() / name).is_file()
