"""`python benchmarks/run.py ...` is `kdagen bench ...`, from a checkout without installing kdagen."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kdagen.commands.bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
