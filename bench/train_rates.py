"""Training step rates from short probe runs, to size a time-boxed run so that its LR schedule ends in time.

    python bench/train_rates.py RUN_DIR [RUN_DIR ...] --out rates.json      # table + JSON of steps/s per run
    python bench/train_rates.py --steps-for 330 --from rates.json           # prints the steps the slowest run
                                                                            # makes in 330 s (one budget for all)

A run's rate is measured between its first and last train records (`wall_s` in metrics.jsonl), so the first
interval, which holds the compilation, is left out. Give the probes at least two log intervals.
"""

import argparse
import json
import pathlib
import sys


def steps_per_second(run_dir: pathlib.Path) -> float:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        sys.exit(f"{run_dir}: no metrics.jsonl (did the probe run?)")
    train = [r for r in map(json.loads, path.read_text().splitlines()) if r["split"] == "train" and "wall_s" in r]
    if len(train) < 2:
        sys.exit(f"{run_dir}: fewer than two timed train records; run the probe for more steps")
    first, last = train[0], train[-1]
    return (last["step"] - first["step"]) / (last["wall_s"] - first["wall_s"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="*", type=pathlib.Path)
    ap.add_argument("--out", type=pathlib.Path, help="write {run name: steps/s} here")
    ap.add_argument("--steps-for", type=float, metavar="SECONDS", help="print the slowest run's steps in SECONDS")
    ap.add_argument("--from", dest="source", type=pathlib.Path, help="rates JSON written by --out")
    args = ap.parse_args()
    rates = json.loads(args.source.read_text()) if args.source else {}
    rates.update({run.name: steps_per_second(run) for run in args.runs})
    if not rates:
        sys.exit("give probe run folders or --from RATES.json")
    if args.out:
        args.out.write_text(json.dumps(rates, indent=2))
    if args.steps_for is not None:
        print(max(1, int(min(rates.values()) * args.steps_for)))
        return
    print("| run | steps/s |\n|---|---|")
    for name, rate in rates.items():
        print(f"| {name} | {rate:.2f} |")


if __name__ == "__main__":
    main()
