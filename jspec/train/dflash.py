"""`jspec train dflash` and `jspec train domino`: block drafters trained on self-distillation data.

The objective (anchors, block forward, loss) is `jspec.train.blocks`; the settings `jspec.train.dflash_config`; the
starting weights `jspec.train.drafter_init`. This module runs it: the jitted train and evaluation steps, the loop
with Orbax checkpoints, the held-out replay of the decode loop and the export.

The embedding and LM head are the target's, frozen; the drafter keeps float32 weights and computes in
`compute_dtype` (bfloat16 by default; jspec.models.precision), with AdamW (β 0.9 / 0.95, no weight decay, global-norm
clip 1.0 as in SpecForge's recipes) under linear warm-up and cosine or linear decay. Runs resume bit for bit from
Orbax checkpoints and end with an official-format export in `OUT/drafter/` (`jspec.io.dflash_checkpoint`). A
finished run also replays greedy decoding over the held-out answers (`walk_evaluate`, `jspec.train.walk`). Output
folder: run.json, checkpoints/<step>/, metrics.jsonl, training.png, drafter/.
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

from jspec.drafters.dflash import DFlashConfig
from jspec.drafters.domino import DominoConfig, DominoDrafter
from jspec.errors import UserError
from jspec.io.dflash_checkpoint import WEIGHTS_FILE, save_dflash_checkpoint
from jspec.io.weights import numpy_dtype
from jspec.models.loading import LoadedModel
from jspec.models.precision import cast_params
from jspec.train import common
from jspec.train.blocks import (anchor_candidates, block_accepted, block_hidden, block_labels, block_loss,
                                sample_blocks, summarize, teacher_probs)
from jspec.train.checkpoints import Checkpoints
from jspec.train.dflash_config import DFlashTrainConfig, curriculum, drafter_config
from jspec.train.drafter_init import fresh_drafter, init_drafter
from jspec.train.packing import Batcher, Packed, Record, pack, pad_rows
from jspec.train.walk import walk_mat

FORMAT = "jspec-dflash-train-v1"
GRAD_CLIP = 1.0  # SpecForge's max_grad_norm for DFlash and Domino


def make_optimizer(lr: Float[Array, ""] | float) -> optax.GradientTransformation:
    return common.adamw(lr, GRAD_CLIP)


@dataclasses.dataclass(frozen=True)
class Objective:
    """What the jitted steps compile for (the schedule and step count are inputs, not part of it)."""

    taps: tuple[int, ...]
    anchors: int
    gamma: float
    ttt: bool
    seed: int
    compute_dtype: str = "bfloat16"
    freeze_backbone: bool = False  # Domino: gradients reach the head only
    reach: bool = False  # position weights: `reach_weights` instead of the decay
    soft_labels: bool = False  # score drafts against the target's distributions (`--labels target`)
    head_lr_scale: float = 1.0  # Domino: the head's updates times this (`--head-lr-scale`)


def _lm_head(target_params: nnx.State) -> Array:
    head = target_params["lm_head"] if "lm_head" in target_params else target_params["embed"]
    return jax.lax.stop_gradient(head[...])


def _forward(params: PyTree, graphdef: nnx.GraphDef, target_graphdef: nnx.GraphDef, target_params: nnx.State,
             batch: dict[str, Array], key: jax.Array, lam, objective: Objective):
    features, final_hidden = common.target_outputs(target_graphdef, target_params, batch, objective.taps,
                                                   logits=False, final_hidden=objective.soft_labels)
    embed = jax.lax.stop_gradient(target_params["embed"][...])
    teacher = None if final_hidden is None else teacher_probs(final_hidden, _lm_head(target_params))

    def loss_fn(params):
        if objective.freeze_backbone:  # zero gradients, and no weight decay: AdamW leaves the backbone as it is
            params = {**params, "backbone": jax.lax.stop_gradient(params["backbone"])}
        model = nnx.merge(graphdef, nnx.State(cast_params(params, objective.compute_dtype)))
        backbone = model.backbone if isinstance(model, DominoDrafter) else model
        blocks = sample_blocks(key, batch, objective.anchors, backbone.cfg.num_drafts)
        hidden = block_hidden(backbone, embed, batch, features, blocks.anchors)
        return block_loss(model, embed, _lm_head(target_params), hidden, blocks, lam, objective.gamma, objective.ttt,
                          objective.reach, teacher)

    return loss_fn


@functools.partial(jax.jit, static_argnames=("graphdef", "target_graphdef", "objective"), donate_argnames=("state",))
def train_step(state: PyTree, target_params: nnx.State, batch: dict[str, Array], lr: Float[Array, ""],
               lam: Float[Array, ""], step: Int[Array, ""], *, graphdef: nnx.GraphDef, target_graphdef: nnx.GraphDef,
               objective: Objective):
    """One optimizer step on blocks anchored by the step's own draw. Returns (state, stats)."""
    key = jax.random.fold_in(jax.random.key(objective.seed), step)
    loss_fn = _forward(state["params"], graphdef, target_graphdef, target_params, batch, key, lam, objective)
    (loss, sums), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
    updates, opt = make_optimizer(lr).update(grads, state["opt"], state["params"])
    if objective.head_lr_scale != 1.0:  # AdamW's update is linear in the rate, so this is the head's own rate
        updates = {**updates, "head": jax.tree.map(lambda u: u * objective.head_lr_scale, updates["head"])}
    new_state = {"params": optax.apply_updates(state["params"], updates), "opt": opt}
    return new_state, {"loss": loss, "grad_norm": optax.tree.norm(grads), "lambda": lam, **sums}


@functools.partial(jax.jit, static_argnames=("graphdef", "target_graphdef", "objective"))
def eval_step(params: PyTree, target_params: nnx.State, batch: dict[str, Array], index: Int[Array, ""], *,
              graphdef: nnx.GraphDef, target_graphdef: nnx.GraphDef, objective: Objective) -> dict[str, Array]:
    """Summed statistics of one held-out batch; its anchors depend only on the seed and `index`, so every
    evaluation scores the same blocks."""
    key = jax.random.fold_in(jax.random.key(objective.seed + 1), index)
    loss_fn = _forward(params, graphdef, target_graphdef, target_params, batch, key, jnp.float32(0.0), objective)
    return loss_fn(params)[1]


def evaluate(rows: Packed, batch_size: int, params, target_params, head: bool, **statics) -> dict:
    sums = None
    for i, start in enumerate(range(0, len(rows), batch_size)):
        out = eval_step(params, target_params, rows.rows(np.arange(start, start + batch_size)), jnp.int32(i),
                        **statics)
        sums = out if sums is None else jax.tree.map(jnp.add, sums, out)
    return summarize(jax.device_get(sums), head)


@functools.partial(jax.jit, static_argnames=("graphdef", "target_graphdef", "objective"))
def accepted_everywhere(params: PyTree, target_params: nnx.State, batch: dict[str, Array], *, graphdef: nnx.GraphDef,
                        target_graphdef: nnx.GraphDef, objective: Objective
                        ) -> tuple[Int[Array, "R T"], Int[Array, "R T"]]:
    """Greedy drafts accepted by the block anchored at every position of the rows, by the final and the base logits
    (0 where no block opens); `objective.anchors` anchors per row at a time, over one target forward."""
    features, _ = common.target_outputs(target_graphdef, target_params, batch, objective.taps, logits=False)
    embed = jax.lax.stop_gradient(target_params["embed"][...])
    model = nnx.merge(graphdef, nnx.State(cast_params(params, objective.compute_dtype)))
    backbone = model.backbone if isinstance(model, DominoDrafter) else model
    candidates = anchor_candidates(batch)
    r, t = candidates.shape
    n = min(objective.anchors, t)

    def group(start):
        anchors = jnp.broadcast_to(start + jnp.arange(n), (r, n))
        keep = (anchors < t) & jnp.take_along_axis(candidates, jnp.minimum(anchors, t - 1), axis=1)
        blocks = block_labels(batch, jnp.where(keep, anchors, 0), keep, backbone.cfg.num_drafts)
        hidden = block_hidden(backbone, embed, batch, features, blocks.anchors)
        return block_accepted(model, embed, _lm_head(target_params), hidden, blocks)

    groups = jax.lax.map(group, jnp.arange(0, t, n))  # 2 × [G, R, N]
    return tuple(x.transpose(1, 0, 2).reshape(r, -1)[:, :t] for x in groups)


def walk_evaluate(rows: Packed, batch_size: int, params, target_params, head: bool, chain: int, **statics) -> dict:
    """Held-out MAT of greedy speculative decoding replayed over the answers (`jspec.train.walk`), drafting `chain`
    tokens a block as the decode loop does, and the mean accept length over every anchor for comparison; with a
    head also its base logits' (`base_*`)."""
    kinds = (("final", ""), ("base", "base_")) if head else (("final", ""),)
    totals = {kind: np.zeros(4, np.int64) for kind, _ in kinds}
    for start in range(0, len(rows), batch_size):
        batch = rows.rows(np.arange(start, start + batch_size))
        accepted = dict(zip(("final", "base"), jax.device_get(accepted_everywhere(params, target_params, batch,
                                                                                  **statics))))
        for kind, _ in kinds:
            totals[kind] += walk_mat(np.minimum(accepted[kind], chain), batch["loss_mask"], batch["segments"])
    out = {}
    for kind, prefix in kinds:
        tokens, forwards, drafts, blocks = totals[kind].tolist()
        out |= {f"{prefix}walk_mat": tokens / max(forwards, 1),
                f"{prefix}anchor_accept_len": 1 + drafts / max(blocks, 1)}
    return out


def _summarize_train(pending: list[dict], head: bool) -> dict:
    """A train interval: the mean objective and gradient norm, the statistics over the interval, λ at its end."""
    record = summarize(jax.tree.map(lambda *x: np.sum(x, axis=0), *pending), head)
    if head:
        record = {"final_loss": record.pop("loss"), **record, "lambda": float(pending[-1]["lambda"])}
    return {"loss": float(np.mean([p["loss"] for p in pending])), **record,
            "grad_norm": float(np.mean([p["grad_norm"] for p in pending]))}


def export_drafter(graphdef: nnx.GraphDef, params: dict, path: pathlib.Path, dtype: str,
                   num_target_layers: int) -> int:
    """Writes the official DFlash/Domino layout to `path` with weights in `dtype`; returns the weights file's size."""
    cast = jax.tree.map(lambda x: jnp.asarray(x, numpy_dtype(dtype)), params)
    save_dflash_checkpoint(nnx.merge(graphdef, nnx.State(cast)), path, num_target_layers)
    return (path / WEIGHTS_FILE).stat().st_size


def _settings(model: LoadedModel, data_dir: common.DataDirs, cfg: DFlashTrainConfig,
              train_only: common.DataDirs | None = None, held_out_only: bool = False) -> dict:
    return {"format": FORMAT, "model": model.name, "vocab_size": model.cfg.vocab_size,
            **common.data_settings(data_dir, train_only, held_out_only), "config": dataclasses.asdict(cfg)}


def load_records(data_dir: common.DataDirs, vocab_size: int, seq_len: int) -> list[Record]:
    # An anchor needs two consecutive answer tokens within the row.
    return common.load_records(data_dir, vocab_size, seq_len, lambda mask: bool((mask[:-1] & mask[1:]).any()))


def train_dflash(model: LoadedModel, data_dir: common.DataDirs, out_dir: pathlib.Path, cfg: DFlashTrainConfig,
                 *, resume: bool = False, export_dtype: str = "bfloat16", stop_at: int | None = None,
                 time_limit: float | None = None, progress: bool = True,
                 train_only: common.DataDirs | None = None, held_out_only: bool = False) -> dict:
    """Trains (or, with `resume`, continues) a DFlash or (`cfg.domino`) Domino drafter until `cfg.steps`, then
    exports to `out_dir/drafter`. `stop_at` (a step) and `time_limit` (seconds) end the run early after a
    checkpoint. Returns the step reached, whether it finished, the last evaluation and the exported weights' size."""
    numpy_dtype(export_dtype)  # validate before hours of training
    train_records, eval_records = common.train_eval_records(
        lambda data: load_records(data, model.cfg.vocab_size, cfg.seq_len), data_dir, train_only, cfg.eval_records,
        cfg.seed, held_out_only)
    out_dir.mkdir(parents=True, exist_ok=True)
    dcfg = drafter_config(model.cfg, cfg)
    with Checkpoints(out_dir / "checkpoints") as checkpoints:
        step = checkpoints.latest_step()
        common.begin_run(out_dir, step, resume, _settings(model, data_dir, cfg, train_only, held_out_only),
                         cfg.command)
        if step is None:
            graphdef, params = init_drafter(model.cfg, dcfg, cfg, model.params)
            state = {"params": params, "opt": make_optimizer(0.0).init(params)}
            step, position = 0, {"epoch": 0, "row": 0}
        else:
            graphdef, state, meta = _restore(checkpoints, step, dcfg, cfg)
            position = meta["data"]
            if progress:
                tqdm.write(f"jspec: resuming from step {step} ({checkpoints.directory / str(step)})", file=sys.stderr)
        # Restored arrays come back committed to a device; commit fresh ones too, so a resumed run reuses the
        # compiled step (the jit cache keys on it).
        state = jax.device_put(state, jax.devices()[0])
        backbone = dcfg.backbone if cfg.domino else dcfg
        statics = dict(graphdef=graphdef, target_graphdef=model.graphdef,
                       objective=Objective(taps=backbone.tap_layers, anchors=cfg.anchors_per_seq,
                                           gamma=cfg.gamma_decay, ttt=cfg.ttt, seed=cfg.seed,
                                           compute_dtype=cfg.compute_dtype,
                                           freeze_backbone=cfg.freeze_backbone,
                                           reach=cfg.position_weights == "reach",
                                           soft_labels=cfg.labels == "target",
                                           head_lr_scale=cfg.head_lr_scale))
        batcher = Batcher(train_records, cfg.seq_len, cfg.batch_size, cfg.seed, **position)
        eval_rows = pad_rows(pack(eval_records, cfg.seq_len), cfg.batch_size) if eval_records else None
        lams = curriculum(cfg)

        def step_fn(state, batch, lr, step):
            return train_step(state, model.params, batch, lr, lams[step], np.int32(step), **statics)

        metrics = common.MetricsLog(out_dir / "metrics.jsonl", keep_until=step)
        state, step, last_eval = common.train_loop(
            cfg, step=step, state=state, batcher=batcher, metrics=metrics, train_step=step_fn,
            summarize=lambda pending: _summarize_train(pending, cfg.domino),
            evaluate=None if eval_rows is None else (
                lambda state: evaluate(eval_rows, cfg.batch_size, state["params"], model.params, cfg.domino,
                                       **statics)),
            save=lambda step, state, position: checkpoints.save(step, state, {"step": step, "data": position}),
            stop_at=stop_at, time_limit=time_limit, progress=progress, desc=f"train {cfg.command}",
            precompile=None if eval_rows is None else functools.partial(
                _compile_evaluations, common.shapes_of(state["params"]), model.params,
                eval_rows.rows(np.arange(cfg.batch_size)), statics))
        result = {"step": step, "finished": step >= cfg.steps, "eval": last_eval}
        if result["finished"] and eval_rows is not None:
            # The decode loop drafts B − 1 tokens a block (Domino too, unless --full-block).
            result["walk"] = walk_evaluate(eval_rows, cfg.batch_size, state["params"], model.params, cfg.domino,
                                           cfg.block_size - 1, **statics)
            metrics.write({"step": step, "split": "walk", **result["walk"]})
            if progress:
                tqdm.write("jspec: held-out MAT of the decode loop replayed over the answers "
                           + ", ".join(f"{k} {v:.3f}" for k, v in result["walk"].items()), file=sys.stderr)
    if result["finished"]:
        result["size_bytes"] = export_drafter(graphdef, state["params"], out_dir / "drafter", export_dtype,
                                              model.cfg.num_layers)
        plot_metrics(out_dir / "metrics.jsonl", out_dir / "training.png")
    return result


def _compile_evaluations(param_shapes: PyTree, target_params: nnx.State, batch: dict[str, np.ndarray],
                         statics: dict) -> None:
    """Ahead-of-time compiles of the evaluation steps (shapes only: the live parameters are donated)."""
    eval_step.lower(param_shapes, target_params, batch, jnp.int32(0), **statics).compile()
    accepted_everywhere.lower(param_shapes, target_params, batch, **statics).compile()


def _restore(checkpoints: Checkpoints, step: int, dcfg: DFlashConfig | DominoConfig, cfg: DFlashTrainConfig):
    """(graphdef, train state, metadata) of checkpoint `step`."""
    abstract_drafter = nnx.eval_shape(lambda: fresh_drafter(dcfg, cfg.seed))
    graphdef, params = nnx.split(abstract_drafter)
    abstract = jax.eval_shape(lambda p: {"params": p, "opt": make_optimizer(0.0).init(p)},
                              nnx.to_pure_dict(params))
    tree, meta = checkpoints.restore(step, abstract)
    if not isinstance(meta.get("data"), dict) or set(meta["data"]) != {"epoch", "row"}:
        raise UserError(f"{checkpoints.directory / str(step)}: checkpoint metadata lacks the data position")
    return graphdef, tree, meta


def export_latest(model: LoadedModel, out_dir: pathlib.Path, dtype: str = "bfloat16",
                  command: str = "dflash") -> tuple[int, int]:
    """Exports the latest checkpoint of the run in `out_dir` to `out_dir/drafter`; returns (step, weights bytes)."""
    numpy_dtype(dtype)
    run = common.read_run(out_dir, FORMAT, command)
    if run.get("vocab_size") != model.cfg.vocab_size:
        raise UserError(f"{out_dir} trained a drafter for a vocabulary of {run.get('vocab_size')} tokens "
                        f"({run.get('model')}); --model has {model.cfg.vocab_size}")
    try:
        cfg = DFlashTrainConfig(**run["config"])
    except (KeyError, TypeError) as e:
        raise UserError(f"{out_dir / 'run.json'}: unreadable settings ({e})") from None
    with Checkpoints(out_dir / "checkpoints") as checkpoints:
        step = checkpoints.latest_step()
        if step is None:
            raise UserError(f"{out_dir} has no checkpoints to export")
        graphdef, state, _ = _restore(checkpoints, step, drafter_config(model.cfg, cfg), cfg)
    return step, export_drafter(graphdef, state["params"], out_dir / "drafter", dtype, model.cfg.num_layers)


def plot_metrics(metrics_path: pathlib.Path, png_path: pathlib.Path) -> None:
    """Loss (train and eval) and per-draft accuracy (eval, else train) against the step."""
    common.plot_metrics(metrics_path, png_path, loss_label="block loss (Σ w·CE / Σ w)", series="draft",
                        acc_title="accuracy per draft position (0 = first)")
