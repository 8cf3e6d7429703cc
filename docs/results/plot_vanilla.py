"""Plot docs/results/2026-11-29-vanilla-decode-h200.json: decode tok/s per batch, ms/step vs the bandwidth floor."""

import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = pathlib.Path(__file__).parent
r = json.loads((here / "2026-11-29-vanilla-decode-h200.json").read_text())
rows = r["decode"]
fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
a.bar([str(x["batch"]) for x in rows], [x["decode_tok_s"] for x in rows], color="tab:blue")
a.set_xlabel("batch")
a.set_ylabel("decode tok/s")
a.set_title("jspec vanilla decode, Qwen2.5-Coder-1.5B bf16")
for i, x in enumerate(rows):
    a.text(i, x["decode_tok_s"], f"{x['decode_tok_s']:.0f}", ha="center", va="bottom")
b.bar([str(x["batch"]) for x in rows], [x["ms_per_step"] for x in rows], color="tab:orange", label="measured")
b.axhline(r["floor_ms_at_4.1TBs"], color="k", ls="--", label="weights / 4.1 TB/s")
b.axhline(1.4, color="tab:red", ls=":", label="goal (700 tok/s at batch 1)")
b.set_xlabel("batch")
b.set_ylabel("ms per decode step")
b.legend(loc="lower right", fontsize=8)
b.set_title(f"{r['device']}, jax {r['jax']}")
fig.tight_layout()
fig.savefig(here / "2026-11-29-vanilla-decode-h200.png", dpi=120)
