"""Subcommands of the `kdagen` CLI, one module each, found by kdagen.cli (see its docstring)."""
