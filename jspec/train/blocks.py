"""The block drafters' training objective: anchors, the training forward of every block of a batch, the loss.

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

With soft labels (`--labels target`, ours) draft j is scored instead by the cross-entropy against the target's
whole next-token distribution at position a + j − 1 (the one that predicts x_{a+j}), from the same target forward
over the row: its last hidden states there times the LM head. Accuracy and accepted lengths are still counted
against the data tokens.

Domino (§1.5): the backbone plus the GRU + low-rank correction head. Teacher forcing: the GRU of row k has read the
ground-truth block tokens x_a .. x_{a+k}; with `ttt` it reads the bonus and the drafter's own greedy drafts instead
(training-time test, the paper's weaker alternative). Loss (1 − λ)·CE(final logits) + λ·CE(base logits) with the
same weights; the base-anchored curriculum moves λ linearly from `curriculum_start` (1) at step 0 to 0 at
`curriculum_fraction` of the steps (SpecForge `linear_lambda_base`), or keeps λ = 0 without it.

The vocabulary-sized logits are computed in chunks of blocks under rematerialisation, so memory stays bounded for
large vocabularies.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Bool, Float, Int

from jspec.drafters.dflash import DFlashDrafter
from jspec.drafters.domino import DominoDrafter
from jspec.models.precision import einsum_f32
from jspec.models.rope import apply_rope

LOGITS_PER_CHUNK = 2**28  # vocabulary logits held at once by the loss (1 GiB in float32)


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


def teacher_positions(anchors: Int[Array, "R N"], num_drafts: int, row_len: int) -> Int[Array, "R N J"]:
    """Positions a .. a + J − 1 of each anchor a: those whose target logits predict the block's labels
    x_{a+1} .. x_{a+J} (clipped to the row; drafts past it are not scored)."""
    return jnp.minimum(anchors[:, :, None] + jnp.arange(num_drafts)[None, None, :], row_len - 1)


def teacher_probs(final_hidden: Float[Array, "R T D"], lm_head: Float[Array, "V D"]) -> Float[Array, "R T V"]:
    """The target's next-token distributions at every position of the rows, in `lm_head`'s dtype: computed once a
    step, a row at a time (a row's float32 logits are the largest temporary), and gathered by each loss chunk. Per
    chunk they would cost a vocabulary product and a softmax per draft row, twice with the chunk's rematerialisation,
    and about twice as many rows, since blocks overlap."""
    def row(h):
        logits = einsum_f32("td,vd->tv", h.astype(lm_head.dtype), lm_head)
        return jax.nn.softmax(logits, axis=-1).astype(lm_head.dtype)

    return jax.lax.map(row, final_hidden)


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
              decay: Float[Array, " J"], reach: bool, soft: Float[Array, "M J V"] | None = None) -> dict[str, Array]:
    """Weighted CE sum and its weight (the position `decay`, or with `reach` the `reach_weights`), per-position hits
    and the blocks' greedy accepted lengths (drafts accepted until the first wrong or unscored one). The CE is
    against `labels`, or against the distributions `soft` when given; hits and accepted lengths always count
    `labels`."""
    if soft is None:
        picked = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    else:  # a product and a sum: one fused reduction that casts `soft` as it reads it
        picked = jnp.sum(soft.astype(jnp.float32) * logits, axis=-1)
    ce = jax.nn.logsumexp(logits, axis=-1) - picked
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


def chunked_drafts(model: DFlashDrafter | DominoDrafter, embed: Float[Array, "V H"], hidden: Float[Array, "R N B H"],
                    blocks: Blocks, teacher_forced: bool, row_len: int | None = None) -> list[Array | None]:
    """The M = R·N blocks' draft rows, GRU input tokens, labels, scored mask, (for a teacher-forced head, else
    None) the head's precomputed GRU states and (soft labels, given the rows' length `row_len`, else None) each
    draft's row-major index into the rows' `teacher_probs`, each split into chunks of blocks whose vocabulary logits
    fit LOGITS_PER_CHUNK: [M / c, c, ...]."""
    backbone = model.backbone if isinstance(model, DominoDrafter) else model
    first, j = backbone.cfg.first_draft_row, backbone.cfg.num_drafts
    m = blocks.anchors.size
    rows = hidden[:, :, first : first + j].reshape(m, j, -1)
    labels, prev, valid = (x.reshape(m, j) for x in (blocks.labels, blocks.prev, blocks.valid))
    # A teacher-forced GRU reads data tokens only: run it once over all blocks (a batch of M), not per chunk.
    head_reads_data = isinstance(model, DominoDrafter) and teacher_forced
    pre = model.head.teacher_forced_pre(embed, rows, prev) if head_reads_data else None
    teacher_index = None
    if row_len is not None:
        row_start = jnp.arange(blocks.anchors.shape[0])[:, None, None] * row_len
        teacher_index = (row_start + teacher_positions(blocks.anchors, j, row_len)).reshape(m, j)
    c = _chunks(m, j * embed.shape[0])
    parts = (rows, prev, labels, valid, pre, teacher_index)
    return [None if x is None else x.reshape(m // c, c, *x.shape[1:]) for x in parts]


def block_loss(model: DFlashDrafter | DominoDrafter, embed: Float[Array, "V H"], lm_head: Float[Array, "V H"],
               hidden: Float[Array, "R N B H"], blocks: Blocks, lam: Float[Array, ""], gamma: float,
               ttt: bool, reach: bool = False, teacher: Float[Array, "R T V"] | None = None
               ) -> tuple[Float[Array, ""], dict[str, Array]]:
    """(1 − λ)·CE(final) + λ·CE(base), each Σ w·CE / Σ w with w the position decay exp(−(j − 1)/γ) or, with
    `reach`, each logits' own `reach_weights`; and summed statistics (see `summarize`). With `teacher` (the target's
    `teacher_probs` over the rows) the CE is against the target's distributions at `teacher_positions` (soft labels)
    instead of the data tokens."""
    j = blocks.labels.shape[-1]
    valid = blocks.valid.reshape(-1, j)
    decay = jnp.exp(-jnp.arange(j, dtype=jnp.float32) / gamma)
    row_len = None if teacher is None else teacher.shape[1]
    split = chunked_drafts(model, embed, hidden, blocks, teacher_forced=not ttt, row_len=row_len)
    flat_teacher = None if teacher is None else teacher.reshape(-1, teacher.shape[-1])

    @jax.checkpoint  # recompute each chunk's logits in the backward pass instead of keeping them all
    def chunk(xs):
        rows_c, prev_c, labels_c, valid_c, pre_c, teacher_c = xs
        final, base = draft_logits(model, embed, lm_head, rows_c, prev_c, ttt, pre_c)
        soft = None if teacher_c is None else flat_teacher[teacher_c]
        out = {f"final_{k}": v for k, v in _ce_terms(final, labels_c, valid_c, decay, reach, soft).items()}
        return out | {f"base_{k}": v for k, v in _ce_terms(base, labels_c, valid_c, decay, reach, soft).items()}

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


def block_accepted(model: DFlashDrafter | DominoDrafter, embed: Float[Array, "V H"], lm_head: Float[Array, "V H"],
                    hidden: Float[Array, "R N B H"], blocks: Blocks) -> tuple[Int[Array, "R N"], Int[Array, "R N"]]:
    """Greedy drafts each block accepts (final, base logits), in chunks of blocks like `block_loss`. A head reads the
    data tokens: until a block's first wrong draft they are its own drafts, so the count is the decode loop's."""
    def chunk(xs):
        rows_c, prev_c, labels_c, valid_c, pre_c, _ = xs
        logits = draft_logits(model, embed, lm_head, rows_c, prev_c, False, pre_c)
        return tuple(jnp.sum(jnp.cumprod((jnp.argmax(x, axis=-1) == labels_c) & valid_c, axis=-1), axis=-1)
                     for x in logits)

    final, base = jax.lax.map(chunk, chunked_drafts(model, embed, hidden, blocks, teacher_forced=True))
    return final.reshape(blocks.anchors.shape), base.reshape(blocks.anchors.shape)
