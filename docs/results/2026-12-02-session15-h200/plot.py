"""Tree-attention K/V read rate as a share of copy bandwidth, H200, per call and for the kernel alone (run from the
repository root):  python docs/results/2026-12-02-session15-h200/plot.py  ->  attention_bw.png"""

import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = pathlib.Path(__file__).parent
BATCHES = (1, 4, 8)


def main():
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    cases = [(t, c) for t in (60, 16, 1) for c in (8192, 32768)]
    width = 0.8 / len(BATCHES)
    for ax, (key, title) in zip(axes, (("kernel_GBps", "per call (XLA glue included)"),
                                       ("kernel_only_GBps", "kernel alone (profiled device time)"))):
        for i, batch in enumerate(BATCHES):
            data = json.loads((HERE / f"attention_bw_b{batch}" / "tree_attention_speed.json").read_text())
            copy = data["meta"]["copy_GBps"]  # a 4 GiB bf16 pass in the same run
            by_case = {(r["T"], r["context"]): 100 * r[key] / copy for r in data["rows"]}
            xs = [x for x, case in enumerate(cases) if case in by_case]
            shares = [by_case[cases[x]] for x in xs]
            bars = ax.bar([x + (i - (len(BATCHES) - 1) / 2) * width for x in xs], shares, width, label=f"batch {batch}")
            ax.bar_label(bars, fmt="%.0f", fontsize=7)
        ax.axhline(60, color="tab:red", linestyle="--", label="goal 60%")
        ax.set_xticks(range(len(cases)), [f"T={t}\n{c // 1024}K" for t, c in cases])
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("K/V bytes read / time, % of copy bandwidth")
    axes[1].legend(fontsize=8)
    fig.suptitle("Tree-attention kernel, Qwen2.5-Coder-1.5B shapes (12 q / 2 kv heads, d 128), bf16, H200")
    fig.tight_layout()
    fig.savefig(HERE / "attention_bw.png", dpi=110)


if __name__ == "__main__":
    main()
