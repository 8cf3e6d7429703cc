"""`jspec train eagle3`: an EAGLE-3 drafter trained with training-time test on self-distillation data.

Recipe (docs/algorithms.md §4.3, docs/training.md): records from `jspec train distill` are packed into fixed
[batch, seq_len] rows; the draft vocabulary is the most frequent answer tokens of the training records; each jitted
step runs the frozen target over the batch (three tap features + logits), unrolls the drafter for `ttt_steps` draft
depths (`jspec.train.ttt`) and applies AdamW (β = 0.9 / 0.95, no weight decay, global-norm clip 0.5) under linear
warm-up and cosine or linear decay. Only the drafter's fc, layer, norm and lm_head train; the embedding is the
target's. They keep float32 weights and compute in `compute_dtype` (jspec.models.precision). Runs resume bit for bit
from Orbax checkpoints and end with an official-format export in `OUT/drafter/`.

Output folder: run.json (settings), checkpoints/<step>/, metrics.jsonl, training.png, drafter/.
"""

import dataclasses
import functools
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, Float, Int, PyTree
from tqdm import tqdm

from jspec.config import ModelConfig
from jspec.drafters.draft_vocab import build_draft_vocab
from jspec.drafters.eagle3 import Eagle3Config, Eagle3Drafter
from jspec.errors import UserError
from jspec.io.eagle3_checkpoint import WEIGHTS_FILE, save_eagle3_checkpoint
from jspec.io.weights import numpy_dtype
from jspec.models.loading import LoadedModel
from jspec.models.precision import COMPUTE_DTYPES, cast_params
from jspec.train import common
from jspec.train.checkpoints import Checkpoints
from jspec.train.common import target_outputs
from jspec.train.packing import Batcher, Packed, Record, pack, pad_rows
from jspec.train.ttt import summarize, ttt_forward, ttt_loss

FORMAT = "jspec-eagle3-train-v1"
GRAD_CLIP = 0.5


@dataclasses.dataclass(frozen=True)
class Eagle3TrainConfig:
    steps: int = 2000
    batch_size: int = 8
    seq_len: int = 1024
    lr: float = 3e-4
    warmup_steps: int = 100
    schedule: str = "cosine"  # or "linear": the decay after warm-up, to 0 at `steps`
    draft_vocab_size: int = 8192  # capped at the target's vocabulary
    ttt_steps: int = 7
    eval_records: int = 64
    eval_every: int = 200
    save_every: int = 500
    log_every: int = 10
    seed: int = 0
    intermediate_size: int | None = None  # the drafter MLP width; None: the target's (the official recipe)
    compute_dtype: str = "bfloat16"  # the drafter's matmuls and activations (weights and AdamW stay float32)

    def __post_init__(self):
        for name in ("batch_size", "seq_len", "ttt_steps", "draft_vocab_size"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.seq_len < self.ttt_steps + 2:
            raise UserError(f"--seq-len {self.seq_len} is too short for {self.ttt_steps} TTT steps (the last step "
                            f"predicts {self.ttt_steps + 1} tokens ahead): use at least {self.ttt_steps + 2}")
        common.check_loop_config(self)
        if self.eval_records < 0:
            raise UserError(f"--eval-records must be >= 0, got {self.eval_records}")
        if self.intermediate_size is not None and self.intermediate_size < 1:
            raise UserError(f"--intermediate-size must be >= 1, got {self.intermediate_size}")
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise UserError(f"--compute-dtype must be one of {', '.join(COMPUTE_DTYPES)}, got {self.compute_dtype!r}")


def drafter_config(target_cfg: ModelConfig, cfg: Eagle3TrainConfig) -> Eagle3Config:
    dcfg = Eagle3Config.for_target(target_cfg, min(cfg.draft_vocab_size, target_cfg.vocab_size))
    if cfg.intermediate_size is not None:
        dcfg = dataclasses.replace(dcfg, intermediate_size=cfg.intermediate_size)
    return dcfg


learning_rate = common.learning_rate  # linear warm-up, then cosine or linear decay to 0 at `steps`


def make_optimizer(lr: Float[Array, ""] | float) -> optax.GradientTransformation:
    """AdamW as in EAGLE-3's recipe (clipping at 0.5)."""
    return common.adamw(lr, GRAD_CLIP)


# ---- data ----------------------------------------------------------------------------------------------------------

def load_records(data_dir: common.DataDirs, vocab_size: int, seq_len: int) -> list[Record]:
    """The distillation records cut to `seq_len`, without those that leave nothing to learn."""
    # Step 0 at position t learns token t + 2: a record needs an answer token at index >= 2 within the row.
    return common.load_records(data_dir, vocab_size, seq_len, lambda mask: bool(mask[2:].any()))


# ---- jitted steps --------------------------------------------------------------------------------------------------

def _loss(params: PyTree, buffers: nnx.State, graphdef: nnx.GraphDef, embed, batch, features, target_logits,
          ttt_steps: int, compute_dtype: str):
    drafter = nnx.merge(graphdef, nnx.State(cast_params(params, compute_dtype)), buffers)
    _, step_logits = ttt_forward(drafter, embed, batch["tokens"], features, batch["positions"], batch["segments"],
                                 ttt_steps)
    return ttt_loss(step_logits, target_logits, batch["loss_mask"], batch["segments"], drafter.d2t[...],
                    drafter.t2d[...])


@functools.partial(jax.jit, static_argnames=("graphdef", "target_graphdef", "taps", "ttt_steps", "compute_dtype"),
                   donate_argnames=("state",))
def train_step(state: PyTree, buffers: nnx.State, target_params: nnx.State, batch: dict[str, Array],
               lr: Float[Array, ""], *, graphdef: nnx.GraphDef, target_graphdef: nnx.GraphDef, taps: tuple[int, ...],
               ttt_steps: int, compute_dtype: str):
    """One optimizer step: target forward, TTT loss and gradient, clipped AdamW update. Returns (state, stats)."""
    features, target_logits = target_outputs(target_graphdef, target_params, batch, taps)
    embed = jax.lax.stop_gradient(target_params["embed"][...])
    (loss, sums), grads = jax.value_and_grad(_loss, has_aux=True)(
        state["params"], buffers, graphdef, embed, batch, features, target_logits, ttt_steps, compute_dtype)
    updates, opt = make_optimizer(lr).update(grads, state["opt"], state["params"])
    new_state = {"params": optax.apply_updates(state["params"], updates), "opt": opt}
    return new_state, {"loss": loss, "grad_norm": optax.tree.norm(grads), **sums}


@functools.partial(jax.jit, static_argnames=("graphdef", "target_graphdef", "taps", "ttt_steps", "compute_dtype"))
def eval_step(params: PyTree, buffers: nnx.State, target_params: nnx.State, batch: dict[str, Array], *,
              graphdef: nnx.GraphDef, target_graphdef: nnx.GraphDef, taps: tuple[int, ...],
              ttt_steps: int, compute_dtype: str) -> dict[str, Float[Array, " S"]]:
    """Summed `ttt_loss` statistics of one batch (no update)."""
    features, target_logits = target_outputs(target_graphdef, target_params, batch, taps)
    _, sums = _loss(params, buffers, graphdef, target_params["embed"][...], batch, features, target_logits, ttt_steps,
                    compute_dtype)
    return sums


# ---- the run -------------------------------------------------------------------------------------------------------

def init_drafter(dcfg: Eagle3Config, seed: int, d2t: Int[np.ndarray, " Vd"],
                 t2d: np.ndarray) -> tuple[nnx.GraphDef, dict, nnx.State]:
    """(graphdef, trainable params as a pure dict, vocabulary buffers) of a fresh float32 drafter."""
    drafter = Eagle3Drafter(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(seed))
    drafter.set_vocab_maps(jnp.asarray(d2t, jnp.int32), jnp.asarray(t2d, bool))
    graphdef, params, buffers = nnx.split(drafter, nnx.Param, ...)
    return graphdef, nnx.to_pure_dict(params), buffers


def export_drafter(graphdef: nnx.GraphDef, params: dict, buffers: nnx.State, path: pathlib.Path, dtype: str) -> int:
    """Writes the official EAGLE-3 layout to `path` with weights in `dtype`; returns the weights file's size."""
    cast = jax.tree.map(lambda x: jnp.asarray(x, numpy_dtype(dtype)), params)
    save_eagle3_checkpoint(nnx.merge(graphdef, nnx.State(cast), buffers), path)
    return (path / WEIGHTS_FILE).stat().st_size


def _settings(model: LoadedModel, data_dir: common.DataDirs, cfg: Eagle3TrainConfig,
              train_only: common.DataDirs | None = None, held_out_only: bool = False) -> dict:
    return {"format": FORMAT, "model": model.name, "vocab_size": model.cfg.vocab_size,
            **common.data_settings(data_dir, train_only, held_out_only), "config": dataclasses.asdict(cfg)}


def evaluate(rows: Packed, batch_size: int, params, buffers, target_params, **statics) -> dict:
    """Loss and per-TTT-step top-1 accuracy over the held-out rows."""
    sums = None
    for start in range(0, len(rows), batch_size):
        out = eval_step(params, buffers, target_params, rows.rows(np.arange(start, start + batch_size)), **statics)
        sums = out if sums is None else jax.tree.map(jnp.add, sums, out)
    return summarize(jax.device_get(sums))


def _summarize_train(pending: list[dict]) -> dict:
    """Metrics of a train interval: mean loss and gradient norm, per-step loss and accuracy over the interval."""
    summary = summarize(jax.tree.map(lambda *x: np.sum(x, axis=0), *pending))
    return {"loss": float(np.mean([p["loss"] for p in pending])), "step_loss": summary["step_loss"],
            "acc": summary["acc"], "grad_norm": float(np.mean([p["grad_norm"] for p in pending]))}


def train_eagle3(model: LoadedModel, data_dir: common.DataDirs, out_dir: pathlib.Path, cfg: Eagle3TrainConfig, *,
                 resume: bool = False, export_dtype: str = "bfloat16", stop_at: int | None = None,
                 time_limit: float | None = None, progress: bool = True,
                 train_only: common.DataDirs | None = None, held_out_only: bool = False) -> dict:
    """Trains (or, with `resume`, continues) until `cfg.steps`, then exports to `out_dir/drafter`.

    `stop_at` (a step) and `time_limit` (seconds) end the run early after saving a checkpoint; rerun with
    `resume` to continue. Returns a summary: the step reached, whether it finished, the last evaluation and the
    exported weights' size.
    """
    numpy_dtype(export_dtype)  # validate before hours of training
    train_records, eval_records = common.train_eval_records(
        lambda data: load_records(data, model.cfg.vocab_size, cfg.seq_len), data_dir, train_only, cfg.eval_records,
        cfg.seed, held_out_only)
    out_dir.mkdir(parents=True, exist_ok=True)
    dcfg = drafter_config(model.cfg, cfg)
    with Checkpoints(out_dir / "checkpoints") as checkpoints:
        step = checkpoints.latest_step()
        common.begin_run(out_dir, step, resume, _settings(model, data_dir, cfg, train_only, held_out_only), "eagle3")
        if step is None:
            d2t, t2d = build_draft_vocab(train_records, model.cfg.vocab_size, dcfg.draft_vocab_size)
            graphdef, params, buffers = init_drafter(dcfg, cfg.seed, d2t, t2d)
            state = {"params": params, "opt": make_optimizer(0.0).init(params)}
            step, position = 0, {"epoch": 0, "row": 0}
        else:
            graphdef, state, buffers, meta = _restore(checkpoints, step, dcfg, cfg)
            position = meta["data"]
            if progress:
                tqdm.write(f"jspec: resuming from step {step} ({checkpoints.directory / str(step)})", file=sys.stderr)
        # Restored arrays come back committed to a device; commit fresh ones too, so a resumed run reuses the
        # compiled step (the jit cache keys on it).
        state = jax.device_put(state, jax.devices()[0])
        statics = dict(graphdef=graphdef, target_graphdef=model.graphdef, taps=dcfg.tap_layers,
                       ttt_steps=cfg.ttt_steps, compute_dtype=cfg.compute_dtype)
        batcher = Batcher(train_records, cfg.seq_len, cfg.batch_size, cfg.seed, **position)
        eval_rows = pad_rows(pack(eval_records, cfg.seq_len), cfg.batch_size) if eval_records else None
        metrics = common.MetricsLog(out_dir / "metrics.jsonl", keep_until=step)

        def step_fn(state, batch, lr, step):
            return train_step(state, buffers, model.params, batch, lr, **statics)

        def save(step, state, position):
            vocab = {"d2t": buffers["d2t"][...], "t2d": buffers["t2d"][...]}
            checkpoints.save(step, {**state, "vocab": vocab}, {"step": step, "data": position})

        state, step, last_eval = common.train_loop(
            cfg, step=step, state=state, batcher=batcher, metrics=metrics, train_step=step_fn,
            summarize=_summarize_train,
            evaluate=None if eval_rows is None else (
                lambda state: evaluate(eval_rows, cfg.batch_size, state["params"], buffers, model.params, **statics)),
            save=save, stop_at=stop_at, time_limit=time_limit, progress=progress, desc="train eagle3",
            precompile=None if eval_rows is None else functools.partial(
                lambda shapes: eval_step.lower(shapes, buffers, model.params, eval_rows.rows(np.arange(cfg.batch_size)),
                                               **statics).compile(), common.shapes_of(state["params"])))
    result = {"step": step, "finished": step >= cfg.steps, "eval": last_eval}
    if result["finished"]:
        result["size_bytes"] = export_drafter(graphdef, state["params"], buffers, out_dir / "drafter", export_dtype)
        plot_metrics(out_dir / "metrics.jsonl", out_dir / "training.png")
    return result


def _restore(checkpoints: Checkpoints, step: int, dcfg: Eagle3Config, cfg: Eagle3TrainConfig):
    """(graphdef, train state, vocabulary buffers, metadata) of checkpoint `step`."""
    placeholder_d2t = np.zeros(dcfg.draft_vocab_size, np.int32)
    placeholder_t2d = np.arange(dcfg.vocab_size) < dcfg.draft_vocab_size
    graphdef, params, _ = init_drafter(dcfg, cfg.seed, placeholder_d2t, placeholder_t2d)
    abstract = jax.eval_shape(lambda p: {"params": p, "opt": make_optimizer(0.0).init(p),
                                         "vocab": {"d2t": placeholder_d2t, "t2d": placeholder_t2d}}, params)
    tree, meta = checkpoints.restore(step, abstract)
    if not isinstance(meta.get("data"), dict) or set(meta["data"]) != {"epoch", "row"}:
        raise UserError(f"{checkpoints.directory / str(step)}: checkpoint metadata lacks the data position")
    vocab = tree.pop("vocab")
    _, _, buffers = init_drafter(dcfg, cfg.seed, np.asarray(vocab["d2t"]), np.asarray(vocab["t2d"]))
    return graphdef, tree, buffers, meta


def export_latest(model: LoadedModel, out_dir: pathlib.Path, dtype: str = "bfloat16") -> tuple[int, int]:
    """Exports the latest checkpoint of the run in `out_dir` to `out_dir/drafter`; returns (step, weights bytes)."""
    numpy_dtype(dtype)
    run = common.read_run(out_dir, FORMAT, "eagle3")
    if run.get("vocab_size") != model.cfg.vocab_size:
        raise UserError(f"{out_dir} trained a drafter for a vocabulary of {run.get('vocab_size')} tokens "
                        f"({run.get('model')}); --model has {model.cfg.vocab_size}")
    try:
        cfg = Eagle3TrainConfig(**run["config"])
    except (KeyError, TypeError) as e:
        raise UserError(f"{out_dir / 'run.json'}: unreadable settings ({e})") from None
    dcfg = drafter_config(model.cfg, cfg)
    with Checkpoints(out_dir / "checkpoints") as checkpoints:
        step = checkpoints.latest_step()
        if step is None:
            raise UserError(f"{out_dir} has no checkpoints to export")
        graphdef, state, buffers, _ = _restore(checkpoints, step, dcfg, cfg)
    return step, export_drafter(graphdef, state["params"], buffers, out_dir / "drafter", dtype)


def plot_metrics(metrics_path: pathlib.Path, png_path: pathlib.Path) -> None:
    """Loss (train and eval) and per-TTT-step accuracy (eval, else train) against the step."""
    common.plot_metrics(metrics_path, png_path, loss_label="TTT loss (Σ 0.8^i · CE_i)", series="step",
                        acc_title="accuracy per TTT step")
