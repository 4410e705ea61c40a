"""Thin entry for use from a checkout: `python cli.py emit ...` is `kdagen emit ...`."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kdagen.cli import main  # noqa: E402  (needs the checkout on sys.path first)

if __name__ == "__main__":
    sys.exit(main())
