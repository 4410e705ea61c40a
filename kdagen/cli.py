"""The `kdagen` command line: one subcommand per module in kdagen/commands/.

A module kdagen/commands/<name>.py joins the CLI as `kdagen <name>` ('_' written '-') by exposing
`register(subparsers)`, which adds its parser (with help and an example) and sets `func` to a function of the parsed args returning an
exit code. `kdagen`, `python -m kdagen` and `python cli.py` all run `main`. Errors a user can act on
(bad configuration, no GPU, no compiler, a file that cannot be written...) print one line; KDAGEN_DEBUG=1
shows the traceback. Exit codes: 0 success, 2 usage errors, 1 failures (kdagen.commands says which is which).
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from . import __version__, commands
from .runtime import env


def command_modules() -> list[str]:
    """The subcommands' names: their modules' names with '-' for '_' (init_recurrence -> init-recurrence)."""
    return sorted(m.name.replace("_", "-") for m in pkgutil.iter_modules(commands.__path__)
                  if not m.name.startswith("_"))


def _broken(subparsers, name: str, error: Exception) -> None:
    """A subcommand whose module fails to import still shows up, and says why it cannot run."""
    p = subparsers.add_parser(name, help=f"(unavailable: {type(error).__name__})")

    def run(args):
        print(f"kdagen {name}: cannot load kdagen.commands.{name.replace('-', '_')}: {type(error).__name__}: {error}",
              file=sys.stderr)
        return 1
    p.set_defaults(func=run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kdagen", description="kdagen: a kernel compiler for chunked linear attention (KDA, gated delta rule).",
        epilog="Run `kdagen COMMAND --help` for a command's options and an example.")
    parser.add_argument("--version", action="version", version=f"kdagen {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in command_modules():
        try:
            module = importlib.import_module(f"{commands.__name__}.{name.replace('-', '_')}")
        except Exception as e:          # one broken subcommand must not take the others down
            _broken(subparsers, name, e)
            continue
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ImportError, NotImplementedError, OSError, RuntimeError, TypeError, ValueError) as e:
        show_traceback, hint = _debug()
        if show_traceback:
            raise
        print(f"kdagen {args.command}: error: {e}\n({hint})", file=sys.stderr)
        return 2 if isinstance(e, commands.UsageError) else 1


def _debug() -> tuple[bool, str]:
    """(KDAGEN_DEBUG, the hint under a one-line error), read while an error is handled: a value that is not 0/1
    goes into the hint instead of replacing the error it was read for."""
    try:
        return env.debug(), "set KDAGEN_DEBUG=1 for the traceback"
    except ValueError as e:
        return False, f"{e}; set it to 1 for the traceback"
