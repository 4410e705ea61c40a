"""`python -m kdagen ...` is the `kdagen` command."""
import sys

from .cli import main

sys.exit(main())
