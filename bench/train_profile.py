"""Where a drafter trainer's step spends its time, with random weights: no GGUF and no distilled data needed, so it
can run on the device while a model's chunks are still being staged.

    python bench/train_profile.py --model qwen2.5-coder-1.5b --kinds dflash,domino,eagle3 --batch-size 16 \
        --seq-len 1024 --profile --out OUT_DIR

Per kind (`jspec train dflash | domino | eagle3`, default recipe otherwise; eagle3 with a 32000-token draft
vocabulary, as the 1.5B recipe), in ms:
- `step`: one optimizer step of the trainer's jitted `train_step`, median of `--steps` after a compiled warm-up;
- `target`: the frozen target's forward alone (block drafters: up to the last tap; eagle3: with its logits), which
  every step spends before the drafter;
- `forward`: the trainer's `eval_step`, the target and the drafter's forward with its losses, no gradient;
- `backward`: step − forward: the gradients (with any rematerialised loss chunks) and AdamW.
- `peak_gib` (where the device reports it, e.g. a GPU): the most device memory in use so far in the process, after
  that kind's steps (kinds run in the order given, so later kinds' peaks include earlier ones').
With `--profile`, also a table of the device kernels per step over `--profile-steps` steps (profile_<kind>.md).
Costs do not depend on the weights' or tokens' values: the records are random token ids whose second half is
answer tokens (where anchors may fall), packed as training packs them.
"""

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.step_breakdown import random_model  # noqa: E402
from bench.timing import timed  # noqa: E402
from bench.trace_summary import format_table, summarize  # noqa: E402
from jspec.train import common, eagle3  # noqa: E402
from jspec.train.dflash import Objective, eval_step, make_optimizer, train_step  # noqa: E402
from jspec.train.dflash_config import DFlashTrainConfig, drafter_config  # noqa: E402
from jspec.train.drafter_init import init_drafter  # noqa: E402
from jspec.train.eagle3 import Eagle3TrainConfig  # noqa: E402
from jspec.train.packing import pack  # noqa: E402

KINDS = ("dflash", "domino", "eagle3")


def random_batch(vocab: int, batch_size: int, seq_len: int, seed: int = 0) -> dict[str, np.ndarray]:
    """`batch_size` packed rows of random records (200 .. seq_len tokens, the second half of each an answer)."""
    rng = np.random.default_rng(seed)
    records = []
    while sum(len(t) for t, _ in records) < (batch_size + 1) * seq_len:  # rows are never overfilled: enough rows
        length = int(rng.integers(200, seq_len + 1))
        tokens = rng.integers(100, vocab - 100, length).astype(np.int32)
        records.append((tokens, np.arange(length) >= length // 2))
    return pack(records, seq_len).rows(np.arange(batch_size))


class Trainer(NamedTuple):
    """One trainer's jitted pieces on a fixed batch: `step(state, i) -> (state, stats)` (it donates its state),
    its starting state, the frozen target's forward alone and the forward with the losses (no gradient)."""

    step: Callable
    state: dict
    target: Callable[[], jax.Array]
    forward: Callable[[dict], dict]


def block_trainer(model, kind: str, batch: dict, frozen_backbone: bool = False, **overrides) -> Trainer:
    """`jspec train dflash` / `jspec train domino` at their defaults, with `overrides`; `frozen_backbone`: Domino's
    head trained alone (`--freeze-backbone`, here on the random backbone: the cost is the same)."""
    cfg = DFlashTrainConfig(warmup_steps=0, domino=kind == "domino", batch_size=batch["tokens"].shape[0],
                            seq_len=batch["tokens"].shape[1], **overrides)
    dcfg = drafter_config(model.cfg, cfg)
    graphdef, params = init_drafter(model.cfg, dcfg, cfg)
    backbone = dcfg.backbone if cfg.domino else dcfg
    objective = Objective(taps=backbone.tap_layers, anchors=cfg.anchors_per_seq, gamma=cfg.gamma_decay, ttt=False,
                          seed=cfg.seed, compute_dtype=cfg.compute_dtype, freeze_backbone=frozen_backbone,
                          soft_labels=cfg.labels == "target")
    statics = dict(graphdef=graphdef, target_graphdef=model.graphdef, objective=objective)
    # The target's weights always go in as an argument: closed over, they would compile in as gigabytes of constants.
    target = jax.jit(lambda tp, b: common.target_outputs(model.graphdef, tp, b, objective.taps, logits=False)[0])
    return Trainer(
        step=lambda state, i: train_step(state, model.params, batch, np.float32(cfg.lr), np.float32(0.5),
                                         np.int32(i), **statics),
        state={"params": params, "opt": make_optimizer(0.0).init(params)},
        target=lambda: target(model.params, batch),
        forward=lambda params: eval_step(params, model.params, batch, np.int32(0), **statics))


def eagle3_trainer(model, batch: dict, draft_vocab_size: int = 32000, **overrides) -> Trainer:
    """`jspec train eagle3` at its defaults (draft vocabulary as the 1.5B recipe's; ids 0 .. Vd − 1), with
    `overrides`."""
    cfg = Eagle3TrainConfig(batch_size=batch["tokens"].shape[0], seq_len=batch["tokens"].shape[1],
                            draft_vocab_size=draft_vocab_size, **overrides)
    dcfg = eagle3.drafter_config(model.cfg, cfg)
    d2t = np.zeros(dcfg.draft_vocab_size, np.int32)
    graphdef, params, buffers = eagle3.init_drafter(dcfg, cfg.seed, d2t, np.arange(dcfg.vocab_size) < d2t.size)
    statics = dict(graphdef=graphdef, target_graphdef=model.graphdef, taps=dcfg.tap_layers, ttt_steps=cfg.ttt_steps,
                   compute_dtype=cfg.compute_dtype)
    target = jax.jit(lambda tp, b: common.target_outputs(model.graphdef, tp, b, dcfg.tap_layers))
    return Trainer(
        step=lambda state, i: eagle3.train_step(state, buffers, model.params, batch, np.float32(cfg.lr), **statics),
        state={"params": params, "opt": eagle3.make_optimizer(0.0).init(params)},
        target=lambda: target(model.params, batch),
        forward=lambda params: eagle3.eval_step(params, buffers, model.params, batch, **statics))


def profile_kind(model, kind: str, batch: dict[str, np.ndarray], steps: int, profile_steps: int,
                 **overrides) -> tuple[dict[str, float], str | None]:
    """({step, target, forward, backward} ms, kernel table or None) of one trainer."""
    batch = jax.device_put(batch)
    trainer = eagle3_trainer(model, batch, **overrides) if kind == "eagle3" else block_trainer(model, kind, batch,
                                                                                               **overrides)
    state = jax.device_put(trainer.state, jax.devices()[0])
    state, stats = trainer.step(state, 0)  # compiles
    jax.block_until_ready((state, stats))
    times = []
    for i in range(steps):
        t = time.perf_counter()
        state, stats = trainer.step(state, i + 1)
        jax.block_until_ready((state, stats))
        times.append(time.perf_counter() - t)
    step_ms = 1e3 * statistics.median(times)
    target_ms = 1e3 * timed(trainer.target, n=max(steps, 3))
    forward_ms = 1e3 * timed(trainer.forward, state["params"], n=max(steps, 3))
    table = None
    if profile_steps:
        device = "/device:GPU:0" if jax.devices()[0].platform == "gpu" else "/host:CPU"
        with tempfile.TemporaryDirectory() as trace_dir:
            with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
                for i in range(profile_steps):
                    state, stats = trainer.step(state, steps + 1 + i)
                jax.block_until_ready((state, stats))
            table = format_table(summarize(trace_dir, device), profile_steps)
    return {"step": step_ms, "target": target_ms, "forward": forward_ms, "backward": step_ms - forward_ms}, table


def peak_gib() -> float | None:
    """The device's peak memory in use so far in this process, in GiB; None where it keeps no such count (CPU)."""
    stats = jax.devices()[0].memory_stats() or {}
    return stats["peak_bytes_in_use"] / 2**30 if "peak_bytes_in_use" in stats else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="a preset: its architecture, random weights")
    ap.add_argument("--dtype", default="bfloat16", help="the frozen target's weights")
    ap.add_argument("--kinds", default="dflash,domino", help=f"comma-separated: {','.join(KINDS)}")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--num-layers", type=int, default=5)
    ap.add_argument("--anchors-per-seq", type=int, default=128)
    ap.add_argument("--compute-dtype", default="bfloat16", help="the drafter's (weights and AdamW stay float32)")
    ap.add_argument("--labels", choices=("data", "target"), default="data", help="block trainers' --labels")
    ap.add_argument("--frozen-backbone", action="store_true", help="domino: the head alone (--freeze-backbone)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps after the compiled warm-up")
    ap.add_argument("--profile", action="store_true", help="also write per-kernel tables (jax.profiler)")
    ap.add_argument("--profile-steps", type=int, default=2)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if bad := set(kinds) - set(KINDS):
        ap.error(f"unknown --kinds {sorted(bad)}; choose from {','.join(KINDS)}")
    model = random_model(args.model, args.dtype)
    batch = random_batch(model.cfg.vocab_size, args.batch_size, args.seq_len)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for kind in kinds:
        shape = {} if kind == "eagle3" else dict(num_layers=args.num_layers, anchors_per_seq=args.anchors_per_seq,
                                                 labels=args.labels, frozen_backbone=args.frozen_backbone)
        ms, table = profile_kind(model, kind, batch, args.steps, args.profile_steps if args.profile else 0,
                                 compute_dtype=args.compute_dtype, **shape)
        rows.append({"kind": kind, **ms, "peak_gib": peak_gib()})
        print(kind, {k: round(v, 1) for k, v in ms.items()}, f"peak_gib {rows[-1]['peak_gib']}", flush=True)
        if table:
            (out / f"profile_{kind}.md").write_text(
                f"# train {kind}, {args.model} (random weights), batch {args.batch_size} x {args.seq_len}, "
                f"{jax.devices()[0].device_kind}\n\n{table}\n")
    report = {"date": time.strftime("%Y-%m-%d"), "device": jax.devices()[0].device_kind, "jax": jax.__version__,
              "model": args.model, "dtype": args.dtype, "command": " ".join(sys.argv), "ms_per_step": rows}
    (out / "train_profile.json").write_text(json.dumps(report, indent=2))
    print(f"{report['device']}  {args.model} (random weights)  batch {args.batch_size} x {args.seq_len}, ms per step")
    print("| trainer | step | target forward | forward (target + drafter + losses) | backward + AdamW | peak GiB |\n"
          "|---|---|---|---|---|---|")
    for r in rows:
        peak = "n/a" if r["peak_gib"] is None else f"{r['peak_gib']:.1f}"
        print(f"| {r['kind']} | {r['step']:.1f} | {r['target']:.1f} | {r['forward']:.1f} | {r['backward']:.1f} "
              f"| {peak} |")


if __name__ == "__main__":
    main()
