"""step_ms.png: session 48's trainer step times on an H100 (bench/train_profile.py, random weights, batch 16 × 1,024),
split into the frozen target's forward, the drafter's forward with its losses, and the backward with AdamW.
Read from the four logs beside this file (the last row of each one's table).
Run from the repository root: python docs/results/2026-12-06-session48-h100/plot.py"""

import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from step_bars import stacked_step_bars  # noqa: E402

here = pathlib.Path(__file__).parent
RUNS = [("DFlash\n(hard labels)", "dflash_data"), ("Domino joint\n(hard labels)", "domino_data"),
        ("Domino joint\n(soft labels)", "domino_target"), ("head alone\n(soft labels)", "domino_target_frozen")]


def step_row(log: pathlib.Path) -> dict[str, float]:
    """The ms columns of the log's table row: step, target forward, forward, backward."""
    cells = [c.strip() for c in log.read_text().strip().splitlines()[-1].strip("|").split("|")]
    step, target, forward, backward = (float(c) for c in cells[1:5])
    return {"step": step, "target": target, "forward": forward, "backward": backward}


rows = [step_row(here / f"{name}.log") for _, name in RUNS]
fig, ax = plt.subplots(figsize=(7, 4))
stacked_step_bars(ax, [label for label, _ in RUNS], rows)
for i, r in enumerate(rows):
    ax.text(i, r["step"] + 8, f"{r['step']:.0f} ms", ha="center")
ax.set_ylim(0, max(r["step"] for r in rows) * 1.15)
ax.set_title("Trainer step, Qwen2.5-Coder-1.5B target, H100 (session 48)")
ax.legend(loc="upper left", fontsize=8)
fig.tight_layout()
fig.savefig(here / "step_ms.png", dpi=120)
print(f"wrote {here / 'step_ms.png'}")
