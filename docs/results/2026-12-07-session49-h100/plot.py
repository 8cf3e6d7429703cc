"""chunk_ms.png: session 49's joint Domino step (soft labels) on an H100 against the loss chunk's size
(bench/train_profile.py, random weights, batch 16 × 1,024), split into the frozen target's forward, the drafter's
forward with its losses, and the backward with AdamW; peak memory above each bar.
Read from the JSON reports beside this file. Run from the repository root:
python docs/results/2026-12-07-session49-h100/plot.py"""

import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from step_bars import stacked_step_bars  # noqa: E402

here = pathlib.Path(__file__).parent
RUNS = [("256 MiB\n(3524276)", "domino_soft_c26_3524276"), ("256 MiB\n(fused soft pick)", "domino_soft_c26_softpick"),
        ("1 GiB\n(new default)", "domino_soft_c28"), ("4 GiB", "domino_soft_c30")]

rows = [json.loads((here / f"{name}.json").read_text())["ms_per_step"][0] for _, name in RUNS]
fig, ax = plt.subplots(figsize=(7, 4))
stacked_step_bars(ax, [label for label, _ in RUNS], rows)
for i, r in enumerate(rows):
    ax.text(i, r["step"] + 8, f"{r['step']:.0f} ms, {r['peak_gib']:.1f} GiB", ha="center", fontsize=8)
ax.set_xlabel("limit on the float32 logits of a loss chunk (LOGITS_PER_CHUNK)")
ax.set_ylim(0, max(r["step"] for r in rows) * 1.45)
ax.set_title("Joint Domino step (soft labels), Qwen2.5-Coder-1.5B, H100 (session 49)", fontsize=10)
ax.legend(loc="upper center", fontsize=8, ncol=3)
fig.tight_layout()
fig.savefig(here / "chunk_ms.png", dpi=120)
print(f"wrote {here / 'chunk_ms.png'}")
