"""Running the `kdagen` CLI in-process for tests (tests/ is on sys.path through conftest.py)."""
from kdagen import cli


def run_main(argv, capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `kdagen ARGV`; argparse's --help and usage errors exit through SystemExit."""
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err
