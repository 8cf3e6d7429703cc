"""The Domino ablation as one table and one bar chart: MAT (and speedup) per training variant and task, from the
`jspec bench` folders that `bash bench/h200_issue5.sh ablation` writes (one per variant).

    python bench/plot_ablation.py OUT/ablation_tf_curriculum OUT/ablation_tf OUT/ablation_ttt --out ablation

A folder's `domino` rows are labelled by the folder's variant (the name after `ablation_`); `domino_headless` rows
(the TF + curriculum drafter with its head off) become "head off"; `dflash` rows (a DFlash drafter trained on the same
budget) are taken once, from the first folder that has them. Writes ablation.md and ablation.png. `--mat-only` drops
the speedup columns, for benches that shared their GPU with a training run (bench/h200_domino_ablation.sh).
"""

import argparse
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from jspec.bench.report import summarize  # noqa: E402

LABELS = {"tf_curriculum": "TF + curriculum", "tf": "TF", "ttt": "TTT", "ttt_curriculum": "TTT + curriculum"}


def ablation_rows(folders: list[pathlib.Path]) -> list[dict]:
    """(variant, dataset, MAT, speedup) rows in the order: DFlash, head off, then the folders' variants as given."""
    rows, have_dflash = [], False
    for folder in folders:
        variant = folder.name.removeprefix("ablation_")
        records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines() if line]
        for r in summarize(records):
            if r["method"] == "domino":
                rows.append({"variant": LABELS.get(variant, variant), **r})
            elif r["method"] == "domino_headless":
                rows.append({"variant": "head off", **r})
            elif r["method"] == "dflash" and not have_dflash:
                rows.append({"variant": "DFlash", **r})
        have_dflash = have_dflash or any(r["variant"] == "DFlash" for r in rows)
    order = {"DFlash": -1, "head off": 0} | {LABELS.get(f.name.removeprefix("ablation_"), f.name): i + 1
                                             for i, f in enumerate(folders)}
    return sorted(rows, key=lambda r: (order[r["variant"]], r["dataset"]))


def write(rows: list[dict], out: pathlib.Path, mat_only: bool = False) -> None:
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    datasets = sorted({r["dataset"] for r in rows})
    cell = {(r["variant"], r["dataset"]): r for r in rows}

    def columns(v: str, d: str) -> str:
        mat = f"{cell[v, d]['mat']:.2f}"
        return mat if mat_only else f"{mat} | {cell[v, d]['speedup']:.2f}x"

    heads = [f"{d} MAT" if mat_only else f"{d} MAT | {d} speedup" for d in datasets]
    lines = ["| variant | " + " | ".join(heads) + " | mean MAT |",
             "|---|" + ("---|" if mat_only else "---|---|") * len(datasets) + "---|"]
    for v in variants:
        mats = [cell[v, d]["mat"] for d in datasets]
        lines.append(f"| {v} | " + " | ".join(columns(v, d) for d in datasets) + f" | {sum(mats) / len(mats):.2f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / len(datasets)
    for i, d in enumerate(datasets):
        xs = [j + (i - (len(datasets) - 1) / 2) * width for j in range(len(variants))]
        bars = ax.bar(xs, [cell[v, d]["mat"] for v in variants], width, label=d)
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.set_xticks(range(len(variants)), variants)
    ax.set_ylabel("MAT (tokens per target step)")
    ax.set_ylim(1.0, None)
    ax.set_title("Domino ablation")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=pathlib.Path)
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("ablation"))
    ap.add_argument("--mat-only", action="store_true", help="no speedup columns (the benches shared their GPU)")
    args = ap.parse_args()
    missing = [str(f) for f in args.folders if not (f / "results.jsonl").is_file()]
    if missing:
        raise SystemExit(f"plot_ablation: no results.jsonl in {', '.join(missing)}")
    write(ablation_rows(args.folders), args.out, args.mat_only)


if __name__ == "__main__":
    main()
