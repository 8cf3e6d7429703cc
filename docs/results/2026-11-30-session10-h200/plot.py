"""Plot this folder's Domino block-kernel measurements: µs per 16-draft block standalone and in the decode loop, and
where the kernel's time goes (ablations), tensor-core products against CUDA-core products."""

import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = pathlib.Path(__file__).parent


def load(name: str) -> dict:
    return json.loads((here / name).read_text())


def check_row(folder: str, variant: str = "default") -> dict:
    return next(r for r in load(f"{folder}/block_kernel_check.json")["rows"]
                if r.get("variant", "default") == variant and r["shape"].startswith("qwen2.5-1.5b"))


def head_cost_us(folder: str, method: str) -> float:
    rows = {r["method"]: r["step"] for r in load(f"{folder}/step_breakdown.json")["ms_per_step"]}
    return 1e3 * (rows[method] - rows["domino_headless"])


mma, fma = check_row("block_check_mma"), check_row("block_check_fma")
standalone = {"XLA loop": mma["xla_loop_us"], "kernel per draft": mma["step_kernels_us"],
              "block, tensor-core dots": mma["block_us"], "block, CUDA cores, 4 warps": fma["block_us"],
              "block, CUDA cores, 8 warps": check_row("block_check_fma", "w8")["block_us"]}
in_loop = {"XLA loop (domino_topk)": head_cost_us("profile_mma", "domino_topk"),
           "block, tensor-core dots": head_cost_us("profile_mma", "domino_block"),
           "block, CUDA cores, 4 warps": head_cost_us("profile_fma_w4", "domino_block"),
           "block, CUDA cores, 8 warps": head_cost_us("profile_fma_w8", "domino_block")}
decode_us = 1e3 * load("profile_fma_w8/step_breakdown.json")["ms_per_step"][0]["decode"]
anatomy = {"tensor-core dots": {r["ablation"]: r["us_per_block"] for r in load("anatomy_mma_run2.json")["rows"]},
           "CUDA cores, 4 warps": {r["ablation"]: r["us_per_block"] for r in load("anatomy_fma.json")["rows"]}}

fig, (a, b, c) = plt.subplots(1, 3, figsize=(16, 4.4))
a.barh(list(standalone), list(standalone.values()), color="tab:blue")
a.set_xlabel("µs per 16-draft block (standalone, 1.5B head shapes)")
a.invert_yaxis()
for i, v in enumerate(standalone.values()):
    a.text(v, i, f" {v:.0f}", va="center")
a.set_xlim(0, 1.2 * max(standalone.values()))
b.barh(list(in_loop), list(in_loop.values()), color="tab:orange")
b.axvline(0.05 * decode_us, color="tab:red", ls=":", label=f"goal: 5% of a decode step ({0.05 * decode_us:.0f} µs)")
b.set_xlabel("head cost per step in the decode loop, µs (step − headless step)")
b.invert_yaxis()
for i, v in enumerate(in_loop.values()):
    b.text(v, i, f" {v:.0f}", va="center")
b.set_xlim(0, 1.25 * max(in_loop.values()))
b.legend(loc="lower right", fontsize=8)
names = [n for n in anatomy["tensor-core dots"] if n in anatomy["CUDA cores, 4 warps"]]
width = 0.4
for k, (label, rows) in enumerate(anatomy.items()):
    c.barh([i + k * width for i in range(len(names))], [rows[n] for n in names], height=width, label=label)
c.set_yticks([i + width / 2 for i in range(len(names))], names)
c.invert_yaxis()
c.set_xlabel("µs per block with parts of each step removed")
c.set_xlim(0, 1.5 * max(max(rows.values()) for rows in anatomy.values()))
c.legend(loc="lower right", fontsize=8)
fig.suptitle("Domino's persistent block kernel on an NVIDIA H200 (jax 0.11.2), 2026-11-30")
fig.tight_layout()
fig.savefig(here / "block_kernel.png", dpi=110)
