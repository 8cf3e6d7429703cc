"""Tree-attention K/V read rate as a share of copy bandwidth, H200 (run from the repository root):
    python docs/results/2026-12-01-session13-h200/plot.py  ->  attention_bw.png"""

import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = pathlib.Path(__file__).parent
# 4 GiB bf16 pass measured on the same machine (the JSON's copy_GBps came from a 1 GiB pass, which reads low).
COPY_GBPS = 3695.0


def main():
    fig, ax = plt.subplots(figsize=(10, 5))
    labels, width = None, 0.38
    for i, batch in enumerate((1, 4)):
        rows = json.loads((HERE / f"attention_bw_b{batch}" / "tree_attention_speed.json").read_text())["rows"]
        rows = [r for r in rows if r["T"] in (60, 16, 1)]  # the cases measured at both batch sizes
        labels = [f"T={r['T']}\n{r['context'] // 1024}K" for r in rows]
        shares = [100 * r["kernel_GBps"] / COPY_GBPS for r in rows]
        bars = ax.bar([x + (i - 0.5) * width for x in range(len(rows))], shares, width, label=f"batch {batch}")
        ax.bar_label(bars, fmt="%.0f%%", fontsize=8)
    ax.axhline(60, color="tab:red", linestyle="--", label="goal 60%")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel(f"K/V bytes read / time, % of {COPY_GBPS / 1000:.1f} TB/s copy")
    ax.set_title("Tree-attention kernel per call (XLA glue included), Qwen2.5-Coder-1.5B shapes, bf16, H200")
    ax.legend()
    fig.tight_layout()
    fig.savefig(HERE / "attention_bw.png", dpi=110)


if __name__ == "__main__":
    main()
