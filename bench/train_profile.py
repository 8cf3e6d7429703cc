"""Where a block drafter's training step spends its time, with random weights: no GGUF and no distilled data needed,
so it can run on the device while a model's chunks are still being staged.

    python bench/train_profile.py --model qwen2.5-coder-1.5b --kinds dflash,domino --batch-size 16 --seq-len 1024 \
        --profile --out OUT_DIR

Per kind (`jspec train dflash` / `jspec train domino`, default recipe otherwise), in ms:
- `step`: one optimizer step of `jspec.train.dflash.train_step`, median of `--steps` after a compiled warm-up;
- `target`: the frozen target's forward up to its last tap alone, which every step spends before the drafter;
- `forward`: `eval_step`, the target and the drafter's forward with its vocabulary-sized losses, no gradient;
- `backward`: step − forward: the gradients (with the rematerialised loss chunks) and AdamW.
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

import jax
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.step_breakdown import random_model  # noqa: E402
from bench.timing import timed  # noqa: E402
from bench.trace_summary import format_table, summarize  # noqa: E402
from jspec.train import common  # noqa: E402
from jspec.train.dflash import (DFlashTrainConfig, Objective, drafter_config, eval_step,  # noqa: E402
                                init_drafter, make_optimizer, train_step)
from jspec.train.packing import pack  # noqa: E402

KINDS = ("dflash", "domino")


def random_batch(vocab: int, batch_size: int, seq_len: int, seed: int = 0) -> dict[str, np.ndarray]:
    """`batch_size` packed rows of random records (200 .. seq_len tokens, the second half of each an answer)."""
    rng = np.random.default_rng(seed)
    records = []
    while sum(len(t) for t, _ in records) < (batch_size + 1) * seq_len:  # rows are never overfilled: enough rows
        length = int(rng.integers(200, seq_len + 1))
        tokens = rng.integers(100, vocab - 100, length).astype(np.int32)
        records.append((tokens, np.arange(length) >= length // 2))
    return pack(records, seq_len).rows(np.arange(batch_size))


def profile_kind(model, kind: str, batch: dict[str, np.ndarray], steps: int, profile_steps: int,
                 **overrides) -> tuple[dict[str, float], str | None]:
    """({step, target, forward, backward} ms, kernel table or None) of one trainer."""
    cfg = DFlashTrainConfig(steps=max(steps, 1) + 1 + profile_steps, warmup_steps=0, domino=kind == "domino",
                            batch_size=batch["tokens"].shape[0], seq_len=batch["tokens"].shape[1], **overrides)
    dcfg = drafter_config(model.cfg, cfg)
    graphdef, params = init_drafter(model.cfg, dcfg, cfg)
    state = jax.device_put({"params": params, "opt": make_optimizer(0.0).init(params)}, jax.devices()[0])
    backbone = dcfg.backbone if cfg.domino else dcfg
    objective = Objective(taps=backbone.tap_layers, anchors=cfg.anchors_per_seq, gamma=cfg.gamma_decay, ttt=False,
                          seed=cfg.seed, compute_dtype=cfg.compute_dtype)
    batch = jax.device_put(batch)
    i = 0

    def one_step(state):  # the step donates its state: always continue from the returned one
        nonlocal i
        i += 1
        state, stats = train_step(state, model.params, batch, np.float32(cfg.lr), np.float32(0.5), np.int32(i),
                                  graphdef=graphdef, target_graphdef=model.graphdef, objective=objective)
        return state, stats

    state, stats = one_step(state)  # compiles
    jax.block_until_ready((state, stats))
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        state, stats = one_step(state)
        jax.block_until_ready((state, stats))
        times.append(time.perf_counter() - t)
    step_ms = 1e3 * statistics.median(times)
    target = jax.jit(lambda p, b: common.target_outputs(model.graphdef, p, b, objective.taps, logits=False)[0])
    target_ms = 1e3 * timed(target, model.params, batch, n=max(steps, 3))
    # The target's weights go in as an argument: closed over, they would compile in as gigabytes of constants.
    forward = jax.jit(lambda p, tp, b: eval_step(p, tp, b, np.int32(0), graphdef=graphdef,
                                                 target_graphdef=model.graphdef, objective=objective))
    forward_ms = 1e3 * timed(forward, state["params"], model.params, batch, n=max(steps, 3))
    table = None
    if profile_steps:
        device = "/device:GPU:0" if jax.devices()[0].platform == "gpu" else "/host:CPU"
        with tempfile.TemporaryDirectory() as trace_dir:
            with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
                for _ in range(profile_steps):
                    state, stats = one_step(state)
                jax.block_until_ready((state, stats))
            table = format_table(summarize(trace_dir, device), profile_steps)
    return {"step": step_ms, "target": target_ms, "forward": forward_ms, "backward": step_ms - forward_ms}, table


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
        ms, table = profile_kind(model, kind, batch, args.steps, args.profile_steps if args.profile else 0,
                                 num_layers=args.num_layers, anchors_per_seq=args.anchors_per_seq,
                                 compute_dtype=args.compute_dtype)
        rows.append({"kind": kind, **ms})
        print(kind, {k: round(v, 1) for k, v in ms.items()}, flush=True)
        if table:
            (out / f"profile_{kind}.md").write_text(
                f"# train {kind}, {args.model} (random weights), batch {args.batch_size} x {args.seq_len}, "
                f"{jax.devices()[0].device_kind}\n\n{table}\n")
    report = {"date": time.strftime("%Y-%m-%d"), "device": jax.devices()[0].device_kind, "jax": jax.__version__,
              "model": args.model, "dtype": args.dtype, "command": " ".join(sys.argv), "ms_per_step": rows}
    (out / "train_profile.json").write_text(json.dumps(report, indent=2))
    print(f"{report['device']}  {args.model} (random weights)  batch {args.batch_size} x {args.seq_len}, ms per step")
    print("| trainer | step | target forward | forward (target + drafter + losses) | backward + AdamW |\n"
          "|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kind']} | {r['step']:.1f} | {r['target']:.1f} | {r['forward']:.1f} | {r['backward']:.1f} |")


if __name__ == "__main__":
    main()
