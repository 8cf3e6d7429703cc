"""What the drafter trainers (`jspec train eagle3 | dflash | domino`) share: the distillation records and their
held-out split, the frozen target's forward over packed rows, AdamW under warm-up and decay, the run folder
(run.json settings, metrics.jsonl, training.png) and the loop that steps, logs, evaluates, checkpoints and stops early.
"""

import json
import pathlib
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, Bool, Float
from tqdm import tqdm

from jspec.errors import UserError
from jspec.models.cache import BlockMask, KVCache
from jspec.train.distill import read_dataset
from jspec.train.packing import Batcher, Record
from jspec.train.ttt import causal_segment_mask

# Settings that only change what is logged or saved, not the trained weights: free to differ on --resume.
FREE_ON_RESUME = ("eval_every", "save_every", "log_every")


class LoopConfig(Protocol):
    steps: int
    lr: float
    warmup_steps: int
    schedule: str  # "cosine" or "linear"
    eval_every: int
    save_every: int
    log_every: int


def check_loop_config(cfg: LoopConfig) -> None:
    """The checks every trainer's config needs (UserError naming the flag)."""
    for name in ("steps", "eval_every", "save_every", "log_every"):
        if getattr(cfg, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}")
    if not cfg.lr > 0:
        raise UserError(f"--lr must be > 0, got {cfg.lr}")
    if not 0 <= cfg.warmup_steps < cfg.steps:
        raise UserError(f"--warmup-steps must be in 0..{cfg.steps - 1} (below --steps), got {cfg.warmup_steps}")
    if cfg.schedule not in ("cosine", "linear"):
        raise UserError(f"unknown schedule {cfg.schedule!r}; expected cosine or linear")


def learning_rate(cfg: LoopConfig) -> optax.Schedule:
    """Linear warm-up from 0 to `lr`, then cosine or linear decay to 0 at `steps`."""
    decay_steps = cfg.steps - cfg.warmup_steps
    if cfg.schedule == "cosine":
        schedule = optax.cosine_decay_schedule(cfg.lr, decay_steps)
    else:
        schedule = optax.linear_schedule(cfg.lr, 0.0, decay_steps)
    if cfg.warmup_steps:
        schedule = optax.join_schedules([optax.linear_schedule(0.0, cfg.lr, cfg.warmup_steps), schedule],
                                        [cfg.warmup_steps])
    return schedule


def adamw(lr: Float[Array, ""] | float, clip: float) -> optax.GradientTransformation:
    """AdamW with β = (0.9, 0.95), no weight decay, after global-norm clipping at `clip`. The learning rate is an
    input of the jitted step (host-side schedule), so runs that differ only in their schedule share a compilation."""
    return optax.chain(optax.clip_by_global_norm(clip), optax.adamw(lr, b1=0.9, b2=0.95, weight_decay=0.0))


# ---- data ----------------------------------------------------------------------------------------------------------

DataDirs = pathlib.Path | Sequence[pathlib.Path]  # one distillation folder, or several read as one


def data_dirs(data: DataDirs) -> list[pathlib.Path]:
    return [data] if isinstance(data, pathlib.Path) else list(data)


def data_settings(data: DataDirs, train_only: DataDirs | None, held_out_only: bool) -> dict:
    """run.json's data keys; "held_out_only" only when set, so that runs from before it still resume."""
    return {"data": data_setting(data), "train_only_data": data_setting(train_only),
            **({"held_out_only": True} if held_out_only else {})}


def data_setting(data: DataDirs | None) -> str | list[str] | None:
    """run.json's "data" (and "train_only_data"): the folder's absolute path, or the list of them."""
    if data is None:
        return None
    paths = [str(d.absolute()) for d in data_dirs(data)]
    return paths[0] if len(paths) == 1 else paths


def load_records(data: DataDirs, vocab_size: int, seq_len: int,
                 usable: Callable[[Bool[np.ndarray, " L"]], bool]) -> list[Record]:
    """The distillation records of every folder, in order, cut to `seq_len`, without those whose cut loss mask
    leaves `usable` nothing to learn."""
    kept = []
    for data_dir in data_dirs(data):
        if not data_dir.is_dir():
            raise UserError(f"--data {data_dir}: no such folder (make one with `jspec train distill`)")
        records = [(tokens, mask) for _, tokens, mask in read_dataset(data_dir)]  # checks the manifest first
        manifest = json.loads((data_dir / "manifest.json").read_text())
        if manifest.get("vocab_size") != vocab_size:
            raise UserError(f"--data {data_dir} was made by a model with a vocabulary of "
                            f"{manifest.get('vocab_size')} tokens ({manifest.get('model')}); the target has "
                            f"{vocab_size}")
        if not records:
            raise UserError(f"--data {data_dir} holds no records")
        kept += [(t[:seq_len], m[:seq_len]) for t, m in records if usable(np.asarray(m[:seq_len], bool))]
    if not kept:
        raise UserError(f"no record of --data {','.join(map(str, data_dirs(data)))} has answer tokens within the "
                        f"first {seq_len} tokens (--seq-len too small for its prompts)")
    return kept


def split_records(records: list[Record], eval_records: int, seed: int) -> tuple[list[Record], list[Record]]:
    """(train, eval): `eval_records` held out at random under `seed`."""
    if eval_records >= len(records):
        raise UserError(f"--eval-records {eval_records} leaves no training records: the data has {len(records)} "
                        "usable records")
    order = np.random.default_rng(seed).permutation(len(records))
    return [records[i] for i in order[eval_records:]], [records[i] for i in order[:eval_records]]


def train_eval_records(load: Callable[[DataDirs], list[Record]], data: DataDirs, train_only: DataDirs | None,
                       eval_records: int, seed: int, held_out_only: bool = False
                       ) -> tuple[list[Record], list[Record]]:
    """(train, eval): the held-out records drawn from `data` alone, and the `train_only` folders' records added to
    training after the rest. A run started (--init-from) or continued on more data keeps the held-out set of a run on
    `data`, so their held-out scores compare and none of its training records is scored as held out.
    `held_out_only`: none of `data` trains, only `train_only` does (a head trained on answers its frozen backbone,
    trained on `data`, never saw, and scored on the backbone's held-out records)."""
    if held_out_only and not train_only:
        raise UserError("--held-out-only trains on --train-only-data alone: pass the folders to train on")
    if held_out_only and not eval_records:
        raise UserError("--held-out-only takes only the held-out records from --data: --eval-records must be > 0")
    train, held_out = split_records(load(data), eval_records, seed)
    return ([] if held_out_only else train) + (load(train_only) if train_only else []), held_out


def target_outputs(target_graphdef: nnx.GraphDef, target_params: nnx.State, batch: dict[str, Array],
                   taps: tuple[int, ...], logits: bool = True, final_hidden: bool = False
                   ) -> tuple[Float[Array, "B T F"], Float[Array, "B T V"] | Float[Array, "B T D"] | None]:
    """Frozen target over packed rows: concatenated tap features and (when `logits`) its logits, or with
    `final_hidden` its last normed hidden states instead (the logits are their product with the LM head: for a caller
    that needs them at some positions only); no gradient flows back. With neither, XLA drops the layers above the
    last tap as well as the LM head."""
    target = nnx.merge(target_graphdef, target_params)
    tokens, segments = batch["tokens"], batch["segments"]
    b, t = tokens.shape
    real = segments != 0
    block = causal_segment_mask(segments) & real[:, :, None] & real[:, None, :]
    cache = KVCache.init(target.cfg, b, t, target.embed[...].dtype)
    hidden, _, tapped = target(tokens, batch["positions"], cache, BlockMask(start=jnp.zeros((b,), jnp.int32),
                                                                            block=block), taps=taps)
    features = jax.lax.stop_gradient(jnp.concatenate(tapped, axis=-1))
    if final_hidden:
        return features, jax.lax.stop_gradient(hidden)
    return features, (jax.lax.stop_gradient(target.logits(hidden)) if logits else None)


# ---- the run folder ------------------------------------------------------------------------------------------------

def save_settings(out_dir: pathlib.Path, settings: dict, check: bool, command: str) -> None:
    """Writes run.json; with `check` (a resumed run), first insists that its training settings are unchanged."""
    if check:
        def comparable(run: dict) -> dict:
            return {**run, "config": {k: v for k, v in run.get("config", {}).items() if k not in FREE_ON_RESUME}}

        old, new = comparable(read_run(out_dir, settings["format"], command)), comparable(settings)
        diffs = [f"--{k.replace('_', '-')} {old['config'].get(k)} vs {v}" for k, v in new["config"].items()
                 if old["config"].get(k) != v]
        diffs += [f"{k} {old.get(k)!r} vs {new.get(k)!r}" for k in sorted((old.keys() | new.keys()) - {"config"})
                  if old.get(k) != new.get(k)]
        if diffs:
            raise UserError(f"{out_dir} holds a run with other settings ({'; '.join(diffs)}); use a new --out")
    (out_dir / "run.json").write_text(json.dumps(settings, indent=2) + "\n")


def begin_run(out_dir: pathlib.Path, latest_step: int | None, resume: bool, settings: dict,
              command: str) -> None:
    """Refuses to overwrite an earlier run's checkpoints (`latest_step`, None when there are none) unless `resume`,
    then writes run.json (a resumed run must keep its training settings)."""
    if latest_step is not None and not resume:
        raise UserError(f"{out_dir} holds checkpoints of an earlier run: pass --resume to continue it, or use a "
                        "new --out")
    save_settings(out_dir, settings, check=latest_step is not None, command=command)


def read_run(out_dir: pathlib.Path, fmt: str, command: str) -> dict:
    """run.json of a `jspec train <command>` run (format `fmt`)."""
    path = out_dir / "run.json"
    try:
        run = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{out_dir} holds no training run (no run.json)") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: unreadable ({e})") from None
    if not isinstance(run, dict) or run.get("format") != fmt:
        raise UserError(f"{path}: not a `jspec train {command}` run")
    return run


class MetricsLog:
    """metrics.jsonl: one record per logged train interval or evaluation. A resumed run drops the records past its
    checkpoint (and a line cut short by a kill), so the file reads as if the run had never stopped."""

    def __init__(self, path: pathlib.Path, keep_until: int):
        kept = []
        for line in path.read_text().splitlines() if path.exists() and keep_until else []:
            try:
                if json.loads(line)["step"] <= keep_until:
                    kept.append(line + "\n")
            except (ValueError, KeyError, TypeError):
                continue
        path.write_text("".join(kept))
        self.path = path

    def write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def fmt_values(values: list[float]) -> str:
    return " ".join(f"{v:.3f}" for v in values)


def shapes_of(tree: Any) -> Any:
    """Shapes, dtypes and shardings of a tree of arrays: what `jit(...).lower` needs to compile ahead of time
    without holding the arrays (train steps donate them)."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


def _precompile_or_warn(precompile: Callable[[], Any]) -> None:
    """An optimisation only: if it fails, the first evaluation compiles (and reports any real error) itself."""
    try:
        precompile()
    except Exception as e:  # noqa: BLE001 - the evaluation reruns the same compile and raises what matters
        print(f"jspec: compiling the evaluation step ahead of time failed ({type(e).__name__}: {str(e)[:200]}); it "
              "compiles at the first evaluation", file=sys.stderr)


def train_loop(cfg: LoopConfig, *, step: int, state: Any, batcher: Batcher, metrics: MetricsLog,
               train_step: Callable[[Any, dict[str, np.ndarray], np.float32, int], tuple[Any, dict]],
               summarize: Callable[[list[dict]], dict], evaluate: Callable[[Any], dict] | None,
               save: Callable[[int, Any, dict], None], stop_at: int | None, time_limit: float | None,
               progress: bool, desc: str, precompile: Callable[[], Any] | None = None
               ) -> tuple[Any, int, dict | None]:
    """Steps from `step` to `cfg.steps`: `train_step(state, batch, lr, step)` → (state, device stats); every
    `log_every` steps `summarize(host stats of the interval)` → a metrics record with "loss" and an "acc" list;
    every `eval_every` steps (and at the end) `evaluate(state)` → a record with "loss" and "acc"; `save(step, state,
    data position)` every `save_every` steps, at the end, and before an early stop (`stop_at` step, `time_limit`
    seconds). `precompile()` (ahead-of-time compilation of the evaluation step) runs on a thread while the first
    steps train, so the first evaluation does not stall training for its compile. Returns (state, step reached, last
    evaluation)."""
    # The whole schedule up front: reading a device value every step would make the host wait for the device.
    lrs = np.asarray(jax.vmap(learning_rate(cfg))(jnp.arange(cfg.steps)), np.float32)
    warming = None
    if precompile is not None and evaluate is not None:
        warming = threading.Thread(target=_precompile_or_warn, args=(precompile,), name="precompile-eval",
                                   daemon=True)
        warming.start()
    last_eval = None
    pending = []
    bar = tqdm(total=cfg.steps, initial=step, desc=desc, unit="step", disable=not progress)
    t0 = time.monotonic()
    while step < cfg.steps:
        lr = lrs[step]
        state, stats = train_step(state, batcher.next(), lr, step)
        step += 1
        pending.append(stats)
        bar.update()
        if step % cfg.log_every == 0 or step == cfg.steps:
            summary = summarize(jax.device_get(pending))
            metrics.write({"step": step, "split": "train", **summary, "lr": float(lr),
                           "wall_s": round(time.monotonic() - t0, 3)})
            bar.set_postfix(loss=f"{summary['loss']:.3f}", acc0=f"{summary['acc'][0]:.3f}")
            pending = []
        if evaluate is not None and (step % cfg.eval_every == 0 or step == cfg.steps):
            if warming is not None:  # its compile, not a second one
                warming.join()
                warming = None
            last_eval = evaluate(state)
            metrics.write({"step": step, "split": "eval", **last_eval})
            if progress:
                tqdm.write(f"step {step}/{cfg.steps}  eval loss {last_eval['loss']:.4f}  acc "
                           f"{fmt_values(last_eval['acc'])}", file=sys.stderr)
        stop = (stop_at is not None and step >= stop_at) or (
            time_limit is not None and time.monotonic() - t0 >= time_limit)
        if step % cfg.save_every == 0 or step == cfg.steps or stop:
            save(step, state, batcher.position)
        if stop:
            break
    if warming is not None:
        warming.join()
    bar.close()
    return state, step, last_eval


def plot_metrics(metrics_path: pathlib.Path, png_path: pathlib.Path, *, loss_label: str, series: str,
                 acc_title: str) -> None:
    """Loss (train and eval) and per-index accuracy (eval, else train) against the step; accuracy curve i is
    labelled f"{series} {i}" and the panel f"{split} {acc_title}"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [json.loads(line) for line in metrics_path.read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    evals = [r for r in records if r["split"] == "eval"]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], label="train")
    if evals:
        ax_loss.plot([r["step"] for r in evals], [r["loss"] for r in evals], "o-", label="eval")
    ax_loss.set(xlabel="step", ylabel=loss_label, title="loss")
    ax_loss.legend()
    acc_source, name = (evals, "eval") if evals else (train, "train")
    for i in range(len(acc_source[0]["acc"]) if acc_source else 0):
        ax_acc.plot([r["step"] for r in acc_source], [r["acc"][i] for r in acc_source], label=f"{series} {i}")
    ax_acc.set(xlabel="step", ylabel="top-1 accuracy", title=f"{name} {acc_title}", ylim=(0, 1))
    ax_acc.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
