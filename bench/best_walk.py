"""Pick, among trained runs, the one whose held-out walk MAT is highest (model selection on held-out answers,
never on the bench). Prints one line per run on stderr and the chosen run's folder name on stdout.

    python bench/best_walk.py /root/work/domino_tf_curriculum /root/work/domino_tf_curriculum_half
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def walk_mat(run: Path) -> float | None:
    """The last "walk" row's walk_mat in run/metrics.jsonl, or None when the run has none."""
    metrics = run / "metrics.jsonl"
    if not metrics.is_file():
        return None
    walks = [row for row in map(json.loads, metrics.read_text().splitlines()) if row.get("split") == "walk"]
    return float(walks[-1]["walk_mat"]) if walks else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="training output folders (each with metrics.jsonl)")
    args = parser.parse_args()
    scored = [(walk_mat(run), run) for run in args.runs]
    for mat, run in scored:
        print(f"{run.name}: held-out walk MAT {'none' if mat is None else f'{mat:.3f}'}", file=sys.stderr)
    scored = [(mat, run) for mat, run in scored if mat is not None]
    if not scored:
        print("no run has a held-out walk (metrics.jsonl split 'walk')", file=sys.stderr)
        return 1
    print(max(scored, key=lambda item: item[0])[1].name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
