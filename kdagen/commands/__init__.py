"""Subcommands of the `kdagen` CLI, one module each, found by kdagen.cli (see its docstring).

Exit codes, the same for every subcommand: 0 success; 2 a usage error — the command line is wrong (argparse's
own errors, contradictory or unknown flags, a configuration or --recurrence reference that does not resolve:
`UsageError`); 1 a failure — what the command line asks for cannot be done here (no GPU or compiler, a plan
that does not verify, a compile error, a file that exists).
"""
from __future__ import annotations

import argparse


class UsageError(ValueError):
    """The command line is wrong: exit code 2."""


def configuration_parser(subparsers, name: str, help: str, doc: str, example: str, run):
    """A subcommand that names a configuration by the shared flags (kdagen.ops.arguments): its parser, to which
    the command adds its own options."""
    from ..ops.arguments import add_config_arguments
    p = subparsers.add_parser(name, help=help, description=doc, epilog=example,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arguments(p)
    p.set_defaults(func=run)
    return p
