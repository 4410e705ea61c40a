"""Subcommands of the `kdagen` CLI, one module each, found by kdagen.cli (see its docstring)."""
from __future__ import annotations

import argparse


def configuration_parser(subparsers, name: str, help: str, doc: str, example: str, run):
    """A subcommand that names a configuration by the shared flags (kdagen.ops.arguments): its parser, to which
    the command adds its own options."""
    from ..ops.arguments import add_config_arguments
    p = subparsers.add_parser(name, help=help, description=doc, epilog=example,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arguments(p)
    p.set_defaults(func=run)
    return p
