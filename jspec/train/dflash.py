"""`jspec train dflash` and `jspec train domino`: block drafters trained on self-distillation data.

DFlash recipe (docs/algorithms.md §3.3; SpecForge `OnlineDFlashModel`): each packed row gets `anchors_per_seq`
random anchors a among the positions whose token and next token are both answer tokens of the same record. An anchor
opens a block `[x_a, MASK × (B − 1)]` at record positions a .. a + B − 1. The block reads the target's tapped
features of its own record strictly before a (the anchor's own feature does not exist yet at inference) and all of
its own rows, non-causally; blocks never see each other, so every block of a row trains in one forward. Draft j
(j = 1 .. J) is scored by cross-entropy against the data token x_{a+j} with weight exp(−(j − 1)/γ), over the draft
positions that stay in the record and are answer tokens; the loss is Σ w·CE / Σ w over the batch. The data are the
target's own greedy answers (`jspec train distill`), so the hard labels are the target's next tokens; like SpecForge,
no soft target distribution is used (the frozen target then only runs up to its last tap). Plain DFlash drafts from
rows 1 .. B − 1 (J = B − 1, row k predicts a + k); Domino's backbone uses `shift_label` (J = B, row k predicts
a + k + 1), as the released Domino checkpoints do.

Domino (§1.5): the backbone plus the GRU + low-rank correction head. Teacher forcing: the GRU of row k has read the
ground-truth block tokens x_a .. x_{a+k}; with `ttt` it reads the bonus and the drafter's own greedy drafts instead
(training-time test, the paper's weaker alternative). Loss (1 − λ)·CE(final logits) + λ·CE(base logits) with the
same weights; the base-anchored curriculum moves λ linearly from `curriculum_start` (1) at step 0 to 0 at
`curriculum_fraction` of the steps (SpecForge `linear_lambda_base`), or keeps λ = 0 without it.

The embedding and LM head are the target's, frozen; the drafter keeps float32 weights and computes in
`compute_dtype` (bfloat16 by default; jspec.models.precision), with AdamW (β 0.9 / 0.95, no weight
decay, global-norm clip 1.0 as in SpecForge's recipes) under linear warm-up and cosine or linear decay. The
vocabulary-sized logits are computed in chunks of blocks under rematerialisation, so memory stays bounded for large
vocabularies. Runs resume bit for bit from Orbax checkpoints and end with an official-format export in
`OUT/drafter/` (`jspec.io.dflash_checkpoint`). A finished run also replays greedy decoding over the held-out answers
(`walk_evaluate`, `jspec.train.walk`). Output folder: run.json, checkpoints/<step>/, metrics.jsonl, training.png,
drafter/.
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
from jaxtyping import Array, Bool, Float, Int, PyTree
from tqdm import tqdm

from jspec.config import ModelConfig
from jspec.drafters.dflash import DFlashConfig, DFlashDrafter
from jspec.drafters.domino import DominoConfig, DominoDrafter
from jspec.errors import UserError
from jspec.io.dflash_checkpoint import (WEIGHTS_FILE, load_dflash_checkpoint, read_dflash_config,
                                       save_dflash_checkpoint)
from jspec.io.weights import numpy_dtype
from jspec.models.loading import LoadedModel
from jspec.models.precision import COMPUTE_DTYPES, cast_params, einsum_f32
from jspec.models.rope import apply_rope
from jspec.train import common
from jspec.train.checkpoints import Checkpoints
from jspec.train.packing import Batcher, Packed, Record, pack, pad_rows
from jspec.train.walk import walk_mat

FORMAT = "jspec-dflash-train-v1"
GRAD_CLIP = 1.0  # SpecForge's max_grad_norm for DFlash and Domino
LOGITS_PER_CHUNK = 2**26  # vocabulary logits held at once by the loss (256 MiB in float32)


INIT_LAYERS = ("random", "target")
POSITION_WEIGHTS = ("decay", "reach")


@dataclasses.dataclass(frozen=True)
class DFlashTrainConfig:
    steps: int = 2000
    batch_size: int = 8
    seq_len: int = 1024
    lr: float = 6e-4  # DFlash paper and SpecForge
    warmup_steps: int = 100
    schedule: str = "cosine"  # or "linear": the decay after warm-up, to 0 at `steps`
    block_size: int = 16
    num_layers: int = 5  # draft layers (Qwen3-8B recipe); also the number of target taps
    anchors_per_seq: int = 128  # blocks per packed row
    gamma_decay: float = 7.0  # γ of the position weights: 7 for blocks of 16 (paper: 5 for 10, 4 for 8)
    # "decay": exp(−(j − 1)/γ), the paper's; "reach": each draft weighted by the probability that the drafter's own
    # earlier drafts are right (`reach_weights`), ours
    position_weights: str = "decay"
    intermediate_size: int | None = None  # drafter MLP width; None: the target's
    eval_records: int = 64
    eval_every: int = 200
    save_every: int = 500
    log_every: int = 10
    seed: int = 0
    domino: bool = False  # add and train the Domino head (`jspec train domino`)
    gru_hidden: int = 1024  # Domino `gru_hidden_dim`
    rank: int = 256  # Domino `emb_dim`
    curriculum: bool = True  # base-anchored curriculum (Domino)
    # λ reaches 0 after this fraction of the steps. 1.0 as in SpecForge's Domino example config and the Domino
    # author's training script (the code default there is 0.5); at 0.5 our 1-epoch runs let the backbone drift once
    # the base loss was gone (held-out base loss 6.59 -> 7.09 over the second half).
    curriculum_fraction: float = 1.0
    # λ at step 0 (SpecForge's `lambda_base_start`). 1 for a fresh head; lower when --init-from continues a trained
    # Domino drafter, whose trained head would otherwise learn little while λ is still near 1.
    curriculum_start: float = 1.0
    ttt: bool = False  # Domino's GRU reads its own greedy drafts instead of the ground truth
    # Train the Domino head alone on a trained backbone (--init-backbone / --init-from), which then stays exactly the
    # drafter it started as: Domino = that DFlash drafter + a head, its uncorrected first draft the same.
    freeze_backbone: bool = False
    init_backbone: str | None = None  # a DFlash/Domino checkpoint directory whose backbone starts the run
    # An exported drafter of the same kind and shape whose every weight starts the run: training continued across
    # machines that keep no checkpoint (AdamW's moments and the schedule start afresh).
    init_from: str | None = None
    init_layers: str = "random"  # "target": the draft layers start as copies of the target's last layers
    compute_dtype: str = "bfloat16"  # the drafter's matmuls and activations (weights and AdamW stay float32)

    def __post_init__(self):
        for name in ("batch_size", "seq_len", "num_layers", "anchors_per_seq", "gru_hidden", "rank"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.block_size < 2:
            raise UserError(f"--block-size must be >= 2, got {self.block_size}")
        if self.seq_len < self.block_size + 1:
            raise UserError(f"--seq-len {self.seq_len} is shorter than a block and its anchor: use at least "
                            f"{self.block_size + 1}")
        if self.anchors_per_seq > self.seq_len - 1:
            raise UserError(f"--anchors-per-seq {self.anchors_per_seq} exceeds the {self.seq_len - 1} anchor "
                            "positions of a row")
        common.check_loop_config(self)
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise UserError(f"--compute-dtype must be one of {', '.join(COMPUTE_DTYPES)}, got {self.compute_dtype!r}")
        if not self.gamma_decay > 0:
            raise UserError(f"--gamma-decay must be > 0, got {self.gamma_decay}")
        if self.position_weights not in POSITION_WEIGHTS:
            raise UserError(f"--position-weights must be one of {', '.join(POSITION_WEIGHTS)}, got "
                            f"{self.position_weights!r}")
        if not 0 < self.curriculum_fraction <= 1:
            raise UserError(f"--curriculum-fraction must be in (0, 1], got {self.curriculum_fraction}")
        if not 0 <= self.curriculum_start <= 1:
            raise UserError(f"--curriculum-start must be in [0, 1], got {self.curriculum_start}")
        if self.eval_records < 0:
            raise UserError(f"--eval-records must be >= 0, got {self.eval_records}")
        if self.intermediate_size is not None and self.intermediate_size < 1:
            raise UserError(f"--intermediate-size must be >= 1, got {self.intermediate_size}")
        if not self.domino and (self.ttt or self.init_backbone or self.freeze_backbone):
            raise UserError("--ttt, --init-backbone and --freeze-backbone apply to `jspec train domino` with its head")
        if self.freeze_backbone and not (self.init_backbone or self.init_from):
            raise UserError("--freeze-backbone keeps the backbone as it starts: give it a trained one with "
                            "--init-backbone (or --init-from)")
        if self.init_layers not in INIT_LAYERS:
            raise UserError(f"--init-layers must be one of {', '.join(INIT_LAYERS)}, got {self.init_layers!r}")
        starts = [flag for flag, on in (("--init-layers", self.init_layers != "random"),
                                         ("--init-backbone", self.init_backbone), ("--init-from", self.init_from))
                  if on]
        if len(starts) > 1:
            raise UserError(f"{' and '.join(starts)} both set the drafter's start: pass one")

    @property
    def command(self) -> str:
        return "domino" if self.domino else "dflash"


def drafter_config(target_cfg: ModelConfig, cfg: DFlashTrainConfig) -> DFlashConfig | DominoConfig:
    """The official architecture for the target: its layer shape, DFlash's tap rule, the last id as mask token;
    Domino adds its head on a `shift_label` backbone with one uncorrected leading draft. A backbone started from
    `cfg.init_backbone` keeps that checkpoint's labelling: a DFlash export's row k predicts start + k, and a frozen
    (or briefly trained) one would draft garbage if asked for start + k + 1."""
    shift_label = cfg.domino
    if cfg.domino and cfg.init_backbone:
        source = read_dflash_config(cfg.init_backbone, target_cfg)
        shift_label = (source.backbone if isinstance(source, DominoConfig) else source).shift_label
    backbone = DFlashConfig.for_target(target_cfg, cfg.num_layers, block_size=cfg.block_size,
                                       intermediate_size=cfg.intermediate_size, shift_label=shift_label)
    if not cfg.domino:
        return backbone
    return DominoConfig(backbone, gru_hidden=cfg.gru_hidden, rank=cfg.rank, prefix_len=1)


def curriculum(cfg: DFlashTrainConfig) -> Float[np.ndarray, " S"]:
    """λ of every optimizer step: the base-logit share of the Domino loss. 0 throughout with a frozen backbone,
    where the base loss trains nothing and λ would only scale the head's loss down."""
    if not (cfg.domino and cfg.curriculum) or cfg.freeze_backbone:
        return np.zeros(cfg.steps, np.float32)
    step = np.arange(cfg.steps, dtype=np.float64)
    share = cfg.curriculum_start * (1.0 - step / (cfg.curriculum_fraction * cfg.steps))
    return np.clip(share, 0.0, 1.0).astype(np.float32)


def make_optimizer(lr: Float[Array, ""] | float) -> optax.GradientTransformation:
    return common.adamw(lr, GRAD_CLIP)


# ---- the training forward ------------------------------------------------------------------------------------------

@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Blocks:
    """The anchors of a batch and what their blocks are scored on."""

    anchors: Int[Array, "R N"]  # row index of each block's anchor (0 where not kept)
    keep: Bool[Array, "R N"]  # a real block (rows may have fewer anchor candidates than N)
    labels: Int[Array, "R N J"]  # x_{a+j}, j = 1 .. J
    prev: Int[Array, "R N J"]  # x_{a+j-1}: the tokens a teacher-forced GRU reads
    valid: Bool[Array, "R N J"]  # draft j is scored: in the anchor's record, an answer token, block kept


def anchor_candidates(batch: dict[str, Array]) -> Bool[Array, "R T"]:
    """Positions a whose token and next token are answer tokens of the same record."""
    mask, seg = batch["loss_mask"], batch["segments"]
    ok = mask[:, :-1] & mask[:, 1:] & (seg[:, :-1] == seg[:, 1:]) & (seg[:, :-1] != 0)
    return jnp.concatenate([ok, jnp.zeros_like(ok[:, :1])], axis=1)


def sample_blocks(key: jax.Array, batch: dict[str, Array], num_anchors: int, num_drafts: int) -> Blocks:
    """`num_anchors` distinct anchors per row drawn uniformly from the candidates (fewer kept when a row has fewer),
    and their labels."""
    candidates = anchor_candidates(batch)
    r, t = candidates.shape
    draw = jnp.where(candidates, jax.random.uniform(key, (r, t)), 2.0)
    anchors = jnp.argsort(draw, axis=1)[:, :num_anchors].astype(jnp.int32)
    keep = jnp.arange(num_anchors)[None, :] < jnp.sum(candidates, axis=1, keepdims=True)
    return block_labels(batch, jnp.where(keep, anchors, 0), keep, num_drafts)


def block_labels(batch: dict[str, Array], anchors: Int[Array, "R N"], keep: Bool[Array, "R N"],
                 num_drafts: int) -> Blocks:
    tokens, seg = batch["tokens"], batch["segments"]
    r, t = tokens.shape
    n = anchors.shape[1]
    index = anchors[:, :, None] + jnp.arange(num_drafts + 1)[None, None, :]  # a .. a + J
    safe = jnp.minimum(index, t - 1).reshape(r, n * (num_drafts + 1))

    def gather(x):
        return jnp.take_along_axis(x, safe, axis=1).reshape(r, n, num_drafts + 1)

    same = (gather(seg) == jnp.take_along_axis(seg, anchors, axis=1)[:, :, None]) & (index < t)
    valid = (same & gather(batch["loss_mask"]))[:, :, 1:] & keep[:, :, None]
    window = gather(tokens)
    return Blocks(anchors=anchors, keep=keep, labels=window[:, :, 1:], prev=window[:, :, :-1], valid=valid)


def _block_attention(q: Float[Array, "R Q Nh D"], k_ctx: Float[Array, "R T K D"], v_ctx: Float[Array, "R T K D"],
                     k_blk: Float[Array, "R Q K D"], v_blk: Float[Array, "R Q K D"], visible: Bool[Array, "R N T"],
                     block_size: int) -> Float[Array, "R Q E"]:
    """Each block's queries over its visible context keys and all keys of its own block, in one softmax. The block
    part is computed per block ([N, B, B] scores), never as a [Q, Q] matrix."""
    r, q_len, heads, d = q.shape
    kv_heads, n = k_ctx.shape[2], q_len // block_size
    qg = q.reshape(r, n, block_size, kv_heads, heads // kv_heads, d)
    k_blk, v_blk = (x.reshape(r, n, block_size, kv_heads, d) for x in (k_blk, v_blk))
    scale = d**-0.5
    # Score axes in dot_general's own output order (batch r, k; then the query's n, b, g; then the keys), so the
    # [.., T] context scores, the largest tensor of the step, are never transposed.
    ctx = einsum_f32("rnbkgd,rtkd->rknbgt", qg, k_ctx) * scale
    ctx = jnp.where(visible[:, None, :, None, None, :], ctx, -jnp.inf)
    own = einsum_f32("rnbkgd,rnckd->rknbgc", qg, k_blk) * scale
    # One softmax over both key sets, without concatenating the context scores with the block's.
    top = jax.lax.stop_gradient(jnp.maximum(ctx.max(-1, keepdims=True), own.max(-1, keepdims=True)))
    e_ctx, e_own = jnp.exp(ctx - top), jnp.exp(own - top)
    denom = e_ctx.sum(-1, keepdims=True) + e_own.sum(-1, keepdims=True)
    out = einsum_f32("rknbgt,rtkd->rnbkgd", (e_ctx / denom).astype(v_ctx.dtype), v_ctx)
    out = out + einsum_f32("rknbgc,rnckd->rnbkgd", (e_own / denom).astype(v_blk.dtype), v_blk)
    return out.reshape(r, q_len, heads * d).astype(q.dtype)


def block_hidden(drafter: DFlashDrafter, embed: Float[Array, "V H"], batch: dict[str, Array],
                 features: Float[Array, "R T F"], anchors: Int[Array, "R N"]) -> Float[Array, "R N B H"]:
    """Final-normed states of every block of the batch, as `DFlashDrafter.__call__` computes one block at inference
    over a context cache holding its record's features before the anchor."""
    cfg = drafter.cfg
    dtype = drafter.fc[...].dtype
    tokens, positions, seg = batch["tokens"], batch["positions"], batch["segments"]
    r, t = tokens.shape
    n, bs = anchors.shape[1], cfg.block_size
    ctx = drafter.hidden_norm(jnp.einsum("rtf,df->rtd", features.astype(dtype), drafter.fc[...]))
    cos_ctx, sin_ctx = drafter._rope(positions)
    block_pos = jnp.take_along_axis(positions, anchors, axis=1)[:, :, None] + jnp.arange(bs)[None, None, :]
    cos, sin = drafter._rope(block_pos.reshape(r, n * bs))
    first = jnp.take_along_axis(tokens, anchors, axis=1)[:, :, None]
    block = jnp.concatenate([first, jnp.full((r, n, bs - 1), cfg.mask_token_id, tokens.dtype)], axis=2)
    x = jnp.take(embed, block.reshape(r, n * bs), axis=0).astype(dtype)
    # Strictly before the anchor and in its record: at inference the anchor (the bonus token) has no feature yet.
    visible = (seg[:, None, :] == jnp.take_along_axis(seg, anchors, axis=1)[:, :, None]) & (
        jnp.arange(t)[None, None, :] < anchors[:, :, None])
    for layer in drafter.layers:
        k_ctx, v_ctx = layer.context_kv(ctx, cos_ctx, sin_ctx)
        qkv = layer._project(layer.input_norm(x), slice(None))
        q = layer.q_norm(qkv[..., : cfg.q_size].reshape(r, n * bs, cfg.num_heads, cfg.head_dim))
        k_blk, v_blk = layer._keys_values(qkv[..., cfg.q_size :], cos, sin)
        out = _block_attention(apply_rope(q, cos, sin), k_ctx, v_ctx, k_blk, v_blk, visible, bs)
        out = jnp.einsum("rqf,df->rqd", out, layer.o[...])
        if layer.o_bias is not None:
            out = out + layer.o_bias[...]
        x = x + out
        x = x + layer.mlp(layer.post_attn_norm(x))
    return drafter.norm(x).reshape(r, n, bs, cfg.hidden_size)


def draft_logits(model: DFlashDrafter | DominoDrafter, embed: Float[Array, "V H"], lm_head: Float[Array, "V H"],
                 rows: Float[Array, "M J H"], prev: Int[Array, "M J"], ttt: bool,
                 pre: Float[Array, "M J R"] | None = None) -> tuple[Float[Array, "M J V"], Float[Array, "M J V"]]:
    """(final, base) float32 logits of the draft rows of M blocks; without a head both are the base logits.

    `prev[:, 0]` is the bonus token; a teacher-forced head reads `prev` (or takes `pre`, its `teacher_forced_pre`,
    when the caller computed it), with `ttt` it reads the bonus and its own greedy drafts (those of
    `jspec.methods.dflash`'s `domino`, through the reference loop; no gradient flows through the choice of tokens).
    """
    base = einsum_f32("mjh,vh->mjv", rows.astype(lm_head.dtype), lm_head)
    if not isinstance(model, DominoDrafter):
        return base, base
    head = model.head
    if ttt:
        graphdef, weights = nnx.split(head)
        frozen = nnx.merge(graphdef, jax.tree.map(jax.lax.stop_gradient, weights))
        drafts = frozen.draft(embed, jax.lax.stop_gradient(rows), jax.lax.stop_gradient(base), prev[:, 0],
                              platform="reference")
        prev = jnp.concatenate([prev[:, :1], drafts[:, :-1]], axis=1)
    if pre is None:
        pre = head.teacher_forced_pre(embed, rows, prev)
    return head.corrected(base, pre), base


def reach_weights(ce: Float[Array, "M J"], valid: Bool[Array, "M J"]) -> Float[Array, "M J"]:
    """Draft j's probability of being reached: the product of the probabilities the logits give the data tokens of
    drafts 1 .. j − 1 (1 for the first draft; 0 after an unscored one), without gradient. Weighting draft j's CE by
    it trains each draft on the blocks whose earlier drafts the drafter itself gets right, the only ones where draft
    j can be accepted; the gradient is then that of the expected number of drafts accepted when the drafter's chain
    is sampled (Σ_j Π_{i≤j} p_i), held as each draft's weighted log-likelihood."""
    p = jnp.where(valid, jnp.exp(-ce), 0.0)
    reached = jnp.cumprod(jnp.concatenate([jnp.ones_like(p[:, :1]), p[:, :-1]], axis=-1), axis=-1)
    return jax.lax.stop_gradient(reached)


def _ce_terms(logits: Float[Array, "M J V"], labels: Int[Array, "M J"], valid: Bool[Array, "M J"],
              decay: Float[Array, " J"], reach: bool) -> dict[str, Array]:
    """Weighted CE sum and its weight (the position `decay`, or with `reach` the `reach_weights`), per-position hits
    and the blocks' greedy accepted lengths (drafts accepted until the first wrong or unscored one)."""
    ce = jax.nn.logsumexp(logits, axis=-1) - jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    weights = jnp.where(valid, reach_weights(ce, valid) if reach else decay, 0.0)
    correct = (jnp.argmax(logits, axis=-1) == labels) & valid
    accepted = jnp.sum(jnp.cumprod(correct, axis=-1), axis=-1)
    return {"ce": jnp.sum(jnp.where(valid, ce * weights, 0.0)), "weight": jnp.sum(weights),
            "hits": jnp.sum(correct, axis=0, dtype=jnp.float32),
            "accepted": jnp.sum(jnp.where(jnp.any(valid, axis=-1), accepted, 0), dtype=jnp.float32)}


def _chunks(blocks: int, per_block: int) -> int:
    """Blocks per loss chunk: the largest divisor of `blocks` whose logits fit LOGITS_PER_CHUNK."""
    limit = max(1, LOGITS_PER_CHUNK // per_block)
    return max(d for d in range(1, min(blocks, limit) + 1) if blocks % d == 0)


def _chunked_drafts(model: DFlashDrafter | DominoDrafter, embed: Float[Array, "V H"], hidden: Float[Array, "R N B H"],
                    blocks: Blocks, teacher_forced: bool) -> list[Array | None]:
    """The M = R·N blocks' draft rows, GRU input tokens, labels, scored mask and (for a teacher-forced head, else
    None) the head's precomputed GRU states, each split into chunks of blocks whose vocabulary logits fit
    LOGITS_PER_CHUNK: [M / c, c, ...]."""
    backbone = model.backbone if isinstance(model, DominoDrafter) else model
    first, j = backbone.cfg.first_draft_row, backbone.cfg.num_drafts
    m = blocks.anchors.size
    rows = hidden[:, :, first : first + j].reshape(m, j, -1)
    labels, prev, valid = (x.reshape(m, j) for x in (blocks.labels, blocks.prev, blocks.valid))
    # A teacher-forced GRU reads data tokens only: run it once over all blocks (a batch of M), not per chunk.
    head_reads_data = isinstance(model, DominoDrafter) and teacher_forced
    pre = model.head.teacher_forced_pre(embed, rows, prev) if head_reads_data else None
    c = _chunks(m, j * embed.shape[0])
    return [None if x is None else x.reshape(m // c, c, *x.shape[1:]) for x in (rows, prev, labels, valid, pre)]


def block_loss(model: DFlashDrafter | DominoDrafter, embed: Float[Array, "V H"], lm_head: Float[Array, "V H"],
               hidden: Float[Array, "R N B H"], blocks: Blocks, lam: Float[Array, ""], gamma: float,
               ttt: bool, reach: bool = False) -> tuple[Float[Array, ""], dict[str, Array]]:
    """(1 − λ)·CE(final) + λ·CE(base), each Σ w·CE / Σ w with w the position decay exp(−(j − 1)/γ) or, with
    `reach`, each logits' own `reach_weights`; and summed statistics (see `summarize`)."""
    j = blocks.labels.shape[-1]
    valid = blocks.valid.reshape(-1, j)
    decay = jnp.exp(-jnp.arange(j, dtype=jnp.float32) / gamma)
    split = _chunked_drafts(model, embed, hidden, blocks, teacher_forced=not ttt)

    @jax.checkpoint  # recompute each chunk's logits in the backward pass instead of keeping them all
    def chunk(xs):
        rows_c, prev_c, labels_c, valid_c, pre_c = xs
        final, base = draft_logits(model, embed, lm_head, rows_c, prev_c, ttt, pre_c)
        out = {f"final_{k}": v for k, v in _ce_terms(final, labels_c, valid_c, decay, reach).items()}
        return out | {f"base_{k}": v for k, v in _ce_terms(base, labels_c, valid_c, decay, reach).items()}

    def body(total, xs):
        return jax.tree.map(jnp.add, total, chunk(xs)), None

    zero = jax.eval_shape(chunk, [None if x is None else x[0] for x in split])
    sums, _ = jax.lax.scan(body, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), zero), split)
    loss = ((1.0 - lam) * sums["final_ce"] / jnp.maximum(sums["final_weight"], 1e-6)
            + lam * sums["base_ce"] / jnp.maximum(sums["base_weight"], 1e-6))
    stats = sums | {"scored": jnp.sum(valid, axis=0, dtype=jnp.float32),
                    "blocks": jnp.sum(jnp.any(valid, axis=-1), dtype=jnp.float32)}
    return loss, stats


def summarize(sums: dict[str, np.ndarray], head: bool) -> dict:
    """Final-logit loss, per-draft accuracy and mean accepted length (counting the bonus token, as τ does) from
    summed `block_loss` statistics; with a head also the base logits' (`base_*`)."""
    scored = np.maximum(np.asarray(sums["scored"]), 1.0)
    blocks = max(float(sums["blocks"]), 1.0)
    out = {}
    for kind, prefix in (("final", ""), ("base", "base_")) if head else (("final", ""),):
        out |= {f"{prefix}loss": float(sums[f"{kind}_ce"]) / max(float(sums[f"{kind}_weight"]), 1e-6),
                f"{prefix}acc": (np.asarray(sums[f"{kind}_hits"]) / scored).tolist(),
                f"{prefix}accept_len": 1.0 + float(sums[f"{kind}_accepted"]) / blocks}
    return out


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


def _lm_head(target_params: nnx.State) -> Array:
    head = target_params["lm_head"] if "lm_head" in target_params else target_params["embed"]
    return jax.lax.stop_gradient(head[...])


def _forward(params: PyTree, graphdef: nnx.GraphDef, target_graphdef: nnx.GraphDef, target_params: nnx.State,
             batch: dict[str, Array], key: jax.Array, lam, objective: Objective):
    features, _ = common.target_outputs(target_graphdef, target_params, batch, objective.taps, logits=False)
    embed = jax.lax.stop_gradient(target_params["embed"][...])

    def loss_fn(params):
        if objective.freeze_backbone:  # zero gradients, and no weight decay: AdamW leaves the backbone as it is
            params = {**params, "backbone": jax.lax.stop_gradient(params["backbone"])}
        model = nnx.merge(graphdef, nnx.State(cast_params(params, objective.compute_dtype)))
        backbone = model.backbone if isinstance(model, DominoDrafter) else model
        blocks = sample_blocks(key, batch, objective.anchors, backbone.cfg.num_drafts)
        hidden = block_hidden(backbone, embed, batch, features, blocks.anchors)
        return block_loss(model, embed, _lm_head(target_params), hidden, blocks, lam, objective.gamma, objective.ttt,
                          objective.reach)

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


def _block_accepted(model: DFlashDrafter | DominoDrafter, embed: Float[Array, "V H"], lm_head: Float[Array, "V H"],
                    hidden: Float[Array, "R N B H"], blocks: Blocks) -> tuple[Int[Array, "R N"], Int[Array, "R N"]]:
    """Greedy drafts each block accepts (final, base logits), in chunks of blocks like `block_loss`. A head reads the
    data tokens: until a block's first wrong draft they are its own drafts, so the count is the decode loop's."""
    def chunk(xs):
        rows_c, prev_c, labels_c, valid_c, pre_c = xs
        logits = draft_logits(model, embed, lm_head, rows_c, prev_c, False, pre_c)
        return tuple(jnp.sum(jnp.cumprod((jnp.argmax(x, axis=-1) == labels_c) & valid_c, axis=-1), axis=-1)
                     for x in logits)

    final, base = jax.lax.map(chunk, _chunked_drafts(model, embed, hidden, blocks, teacher_forced=True))
    return final.reshape(blocks.anchors.shape), base.reshape(blocks.anchors.shape)


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
        return _block_accepted(model, embed, _lm_head(target_params), hidden, blocks)

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


# ---- the run -------------------------------------------------------------------------------------------------------

def _fresh(dcfg: DFlashConfig | DominoConfig, seed: int) -> DFlashDrafter | DominoDrafter:
    cls = DominoDrafter if isinstance(dcfg, DominoConfig) else DFlashDrafter
    return cls(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(seed))


def target_layer_copy(target_cfg: ModelConfig, backbone: DFlashConfig, target_params: dict) -> dict:
    """Backbone weights (pure dict, `fc` and the norms included) that start the draft layers as copies of the
    target's last decoder layers. The layers keep the target's shape, so each copy is exact, except q/k norms when
    the target has none (they stay at 1). `fc` starts by passing the last tap through, and the final norm is the
    target's: the copied layers then read context keys/values close to the ones they were trained on.
    (Copies of the first layers trained worse on CPU: docs/results/2026-12-03-init-layers-smollm2-cpu.md.)"""
    n, num_target = backbone.num_layers, target_cfg.num_layers
    if n > num_target:
        raise UserError(f"--init-layers target: {n} draft layers but the target has only {num_target}")
    if backbone.intermediate_size != target_cfg.intermediate_size:
        raise UserError(f"--init-layers target: --intermediate-size {backbone.intermediate_size} differs from the "
                        f"target's {target_cfg.intermediate_size}")
    first = num_target - n
    layers = {}
    for i in range(n):
        src = target_params["layers"][first + i]
        attn = src["attn"]
        layer = {"input_norm": src["input_norm"], "post_attn_norm": src["post_attn_norm"], "mlp": src["mlp"],
                 "qkv": attn["qkv"], "o": attn["o"]}
        if backbone.attention_bias:
            layer["qkv_bias"] = attn["qkv_bias"]
        for norm in ("q_norm", "k_norm"):
            if attn.get(norm) is not None:
                layer[norm] = attn[norm]
        layers[i] = layer
    d, taps = backbone.hidden_size, len(backbone.tap_layers)
    fc = np.zeros((d, taps * d), np.float32)
    fc[:, (taps - 1) * d:] = np.eye(d, dtype=np.float32)
    return {"fc": fc, "layers": layers, "norm": target_params["norm"],
            "hidden_norm": target_params["layers"][first]["input_norm"]}


def _merge_into(params: dict, update: dict) -> dict:
    """`params` with the leaves of the (partial) `update` in place, as float32 arrays of the same shapes."""
    out = dict(params)
    for key, value in update.items():
        if isinstance(value, dict):
            out[key] = _merge_into(params[key], value)
        else:
            if tuple(np.shape(value)) != tuple(np.shape(params[key])):
                raise AssertionError(f"{key}: {np.shape(value)} vs {np.shape(params[key])}")
            out[key] = jnp.array(value, jnp.float32, copy=True)  # own buffers: the train step donates them
    return out


def init_drafter(target_cfg: ModelConfig, dcfg: DFlashConfig | DominoConfig, cfg: DFlashTrainConfig,
                 target_params: nnx.State | None = None) -> tuple[nnx.GraphDef, dict]:
    """(graphdef, float32 params as a pure dict) of the starting drafter: random, with every weight of
    `cfg.init_from` or the backbone of `cfg.init_backbone` when given (the architecture must match; for the backbone,
    whose `shift_label` `drafter_config` takes from it), or with draft layers copied from the target's (`cfg.init_layers`, which needs
    `target_params`)."""
    drafter = _fresh(dcfg, cfg.seed)
    if cfg.init_layers != "random":
        graphdef, params = nnx.split(drafter)
        params = nnx.to_pure_dict(params)
        backbone = dcfg.backbone if isinstance(dcfg, DominoConfig) else dcfg
        copy = target_layer_copy(target_cfg, backbone, nnx.to_pure_dict(target_params))
        if isinstance(dcfg, DominoConfig):
            return graphdef, {**params, "backbone": _merge_into(params["backbone"], copy)}
        return graphdef, _merge_into(params, copy)
    if cfg.init_from:
        source = load_dflash_checkpoint(cfg.init_from, target_cfg, "float32")
        if isinstance(source, DominoDrafter) != isinstance(drafter, DominoDrafter):
            kinds = {True: "a Domino drafter (with its head)", False: "a DFlash drafter (no head)"}
            raise UserError(f"--init-from {cfg.init_from} holds {kinds[isinstance(source, DominoDrafter)]}; "
                            f"`jspec train {cfg.command}` trains {kinds[isinstance(drafter, DominoDrafter)]}")
        diffs = _config_diffs(source.cfg, drafter.cfg)
        if diffs:
            raise UserError(f"--init-from {cfg.init_from}: its drafter differs from the one to train "
                            f"({'; '.join(diffs)})")
        nnx.update(drafter, nnx.state(source))
    if cfg.init_backbone:
        source = load_dflash_checkpoint(cfg.init_backbone, target_cfg, "float32")
        source = source.backbone if isinstance(source, DominoDrafter) else source
        want = drafter.backbone.cfg if isinstance(drafter, DominoDrafter) else drafter.cfg
        diffs = [f"{f.name} {getattr(source.cfg, f.name)} vs {getattr(want, f.name)}"
                 for f in dataclasses.fields(want) if getattr(source.cfg, f.name) != getattr(want, f.name)]
        if diffs:
            raise UserError(f"--init-backbone {cfg.init_backbone}: its backbone differs from the one to train "
                            f"({'; '.join(diffs)})")
        target = drafter.backbone if isinstance(drafter, DominoDrafter) else drafter
        nnx.update(target, nnx.state(source))
    graphdef, params = nnx.split(drafter)
    return graphdef, nnx.to_pure_dict(params)


def _config_diffs(have, want, prefix: str = "") -> list[str]:
    """`name have vs want` for every field where two (nested) drafter configs differ."""
    diffs = []
    for f in dataclasses.fields(want):
        a, b = getattr(have, f.name), getattr(want, f.name)
        if dataclasses.is_dataclass(b):
            diffs += _config_diffs(a, b, f"{prefix}{f.name}.")
        elif a != b:
            diffs.append(f"{prefix}{f.name} {a} vs {b}")
    return diffs


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
        if step is not None and not resume:
            raise UserError(f"{out_dir} holds checkpoints of an earlier run: pass --resume to continue it, or use a "
                            "new --out")
        common.save_settings(out_dir, _settings(model, data_dir, cfg, train_only, held_out_only), check=step is not None,
                             command=cfg.command)
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
                                           reach=cfg.position_weights == "reach"))
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
    abstract_drafter = nnx.eval_shape(lambda: _fresh(dcfg, cfg.seed))
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

