"""`kdagen cache`: list or clear the compiled kernels in KDAGEN_CACHE_DIR."""
from __future__ import annotations

import argparse
import json
import time

EXAMPLE = """examples:
  kdagen cache list                 # every cached image: arch, uri, size, age, intact
  kdagen cache list --json
  kdagen cache clear --uri kda_     # drop the images (and KDAGEN_LINEINFO's kept sources) whose uri has 'kda_'
  kdagen cache clear                # drop everything"""


def run_list(args) -> int:
    from ..runtime import cache, cache_dir
    root = cache_dir()
    listed = cache.entries(root)
    if args.json:
        print(json.dumps([{"arch": e.arch, "uri": e.uri, "file": e.path.name, "bytes": e.bytes,
                           "mtime": e.mtime, "intact": e.intact} for e in listed], indent=2))
        return 0
    print(f"cache: {root} ({len(listed)} images, {sum(e.bytes for e in listed) / 1024:.1f} KiB)")
    now = time.time()
    for e in listed:
        state = "" if e.intact else "  CORRUPT (rebuilt on next use)"
        print(f"  {e.arch:<7} {e.uri}  {e.path.name}  {e.bytes / 1024:.1f} KiB  "
              f"{(now - e.mtime) / 3600:.1f} h old{state}")
    return 0


def run_clear(args) -> int:
    from ..runtime import cache, cache_dir
    root = cache_dir()
    removed = cache.clear(root, args.uri)
    print(f"removed {removed} image(s) from {root}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("cache", help="list or clear cached kernels", description=__doc__,
                              epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = actions.add_parser("list", help="list cached images", epilog=EXAMPLE,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=run_list)
    clear = actions.add_parser("clear", help="delete cached images", epilog=EXAMPLE,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    clear.add_argument("--uri", metavar="TEXT", help="only images whose uri contains TEXT")
    clear.set_defaults(func=run_clear)
