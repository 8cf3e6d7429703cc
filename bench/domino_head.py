"""A Domino drafter trained on a frozen DFlash drafter, split into that backbone and its head (jspec.io.domino_head):
what a device session sends back (the head, 2 polls instead of 10) and rebuilds (the backbone, instead of carrying
the DFlash drafter in beside the Domino one).

    python bench/domino_head.py backbone RUN/domino_x/drafter RUN/dflash/drafter     # the DFlash drafter inside
    python bench/domino_head.py head RUN/domino_x/drafter RUN/dflash/drafter OUT     # the head alone, checked
    python bench/domino_head.py join RUN/dflash/drafter OUT RUN/domino_x/drafter     # the whole Domino again
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout, jspec not installed

from jspec.errors import UserError  # noqa: E402
from jspec.io import domino_head  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="op", required=True)
    sub.add_parser("backbone").add_argument("paths", nargs=2, metavar=("DOMINO", "OUT"))
    sub.add_parser("head").add_argument("paths", nargs=3, metavar=("DOMINO", "BASE", "OUT"))
    sub.add_parser("join").add_argument("paths", nargs=3, metavar=("BASE", "HEAD", "OUT"))
    args = parser.parse_args()
    try:
        getattr(domino_head, args.op)(*args.paths)
    except UserError as e:
        print(f"domino_head {args.op}: {e}", file=sys.stderr)
        return 2
    print(f"domino_head {args.op}: wrote {args.paths[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
