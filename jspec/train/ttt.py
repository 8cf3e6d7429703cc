"""EAGLE-3 training-time test (TTT, docs/algorithms.md §4.3): the drafter unrolled over draft depths at every position.

Step 0 reads pair t = (target feature g_t, embedding of x_{t+1}) at RoPE position t, attending causally to the pairs
of its own record, and learns the target's distribution of x_{t+2}. Step i >= 1 reads (its own step i-1 output at t,
embedding of x_{t+i+1}) at position t + i and learns x_{t+i+2}: exactly a chain node at tree depth i whose root is
pair t, as `jspec.methods.eagle3` drafts at inference. Such a node sees the pairs up to its root plus its ancestors;
the ancestors of position t's step-i node are position t's own earlier steps, so step-j keys (j >= 1) are visible
only on the diagonal. Everything runs on the drafter's own weights, so what is trained is what drafts.

Rows may pack several records: `segments` numbers them (0 = padding) and attention never crosses a record.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from jspec.drafters.eagle3 import Eagle3Drafter
from jspec.models.precision import einsum_f32
from jspec.models.rope import apply_rope, rope_tables

STEP_DECAY = 0.8  # EAGLE-3: step i's loss is weighted 0.8^i


def shift_left(x: Array, k: int, fill=0) -> Array:
    """`x[:, t + k]` at position t (axis 1), `fill` past the end."""
    if k == 0:
        return x
    pad = jnp.full((x.shape[0], k, *x.shape[2:]), fill, x.dtype)
    return jnp.concatenate([x[:, k:], pad], axis=1)


def causal_segment_mask(segments: Int[Array, "B T"]) -> Bool[Array, "B T T"]:
    """Query t sees key s <= t of the same record. Padding (segment 0) sees earlier padding: never an empty row."""
    t = segments.shape[1]
    same = segments[:, :, None] == segments[:, None, :]
    return same & jnp.tril(jnp.ones((t, t), bool))[None]


def _attention(q: Float[Array, "B T N D"], keys: list, values: list, visible: Bool[Array, "B T T"]):
    """Step-0 keys under `visible`, every later step's key at the query's own position; one softmax over all."""
    b, t, n, d = q.shape
    kv_heads = keys[0].shape[2]
    qg = q.reshape(b, t, kv_heads, n // kv_heads, d)
    scale = d**-0.5
    # Score axes in dot_general's own output order (batch b, k; the query's t, g; the keys), so the [.., T, T]
    # causal scores are never transposed; one softmax over them and the diagonals, without concatenating.
    causal = einsum_f32("btkgd,bskd->bktgs", qg, keys[0]) * scale
    causal = jnp.where(visible[:, None, :, None, :], causal, -jnp.inf)
    diagonal = [einsum_f32("btkgd,btkd->bktg", qg, k) * scale for k in keys[1:]]
    top = causal.max(-1)
    for score in diagonal:
        top = jnp.maximum(top, score)
    top = jax.lax.stop_gradient(top)
    e_causal = jnp.exp(causal - top[..., None])
    e_diagonal = [jnp.exp(score - top) for score in diagonal]
    denom = e_causal.sum(-1) + sum(e_diagonal, jnp.zeros_like(top))
    out = einsum_f32("bktgs,bskd->btkgd", (e_causal / denom[..., None]).astype(values[0].dtype), values[0])
    for e, v in zip(e_diagonal, values[1:]):
        out = out + einsum_f32("bktg,btkd->btkgd", (e / denom).astype(v.dtype), v)
    return out.reshape(b, t, n * d).astype(q.dtype)


def ttt_forward(
    drafter: Eagle3Drafter,
    embed_table: Float[Array, "V H"],
    tokens: Int[Array, "B T"],
    features: Float[Array, "B T F"],
    positions: Int[Array, "B T"],
    segments: Int[Array, "B T"],
    steps: int,
) -> tuple[list[Float[Array, "B T H"]], list[Float[Array, "B T Vd"]]]:
    """Pre-norm hidden outputs and float32 draft-vocabulary logits of each of `steps` TTT steps.

    `tokens` are the record tokens x_t and `features` the concatenated target taps g_t at the same positions;
    `positions` are positions within each record. Step i's output at t is meaningful while t + i + 1 stays in t's
    record; the caller masks the rest.
    """
    cfg, layer = drafter.cfg, drafter.layer
    dtype = drafter.fc[...].dtype
    b, t = tokens.shape
    inv_freq = jnp.asarray(drafter.inv_freq, jnp.float32)
    visible = causal_segment_mask(segments)
    x = jnp.einsum("btf,df->btd", features.astype(dtype), drafter.fc[...])
    keys, values, hidden, logits = [], [], [], []
    for i in range(steps):
        emb = jnp.take(embed_table, shift_left(tokens, i + 1), axis=0).astype(dtype)
        cos, sin = rope_tables(positions + i, inv_freq, drafter.rope_scale)
        qkv = jnp.einsum("btd,fd->btf", jnp.concatenate([layer.input_norm(emb), layer.hidden_norm(x)], -1),
                         layer.qkv[...])
        q, k, v = jnp.split(qkv, [cfg.q_size, cfg.q_size + cfg.kv_size], axis=-1)
        q = apply_rope(q.reshape(b, t, cfg.num_heads, cfg.head_dim), cos, sin)
        keys.append(apply_rope(k.reshape(b, t, cfg.num_kv_heads, cfg.head_dim), cos, sin))
        values.append(v.reshape(b, t, cfg.num_kv_heads, cfg.head_dim))
        out = x + jnp.einsum("btf,df->btd", _attention(q, keys, values, visible), layer.o[...])
        x = out + layer.mlp(layer.post_attn_norm(out))  # the next step's hidden input
        hidden.append(x)
        logits.append(einsum_f32("btd,vd->btv", drafter.norm(x), drafter.lm_head[...]))
    return hidden, logits


def ttt_loss(
    step_logits: list[Float[Array, "B T Vd"]],
    target_logits: Float[Array, "B T V"],
    loss_mask: Bool[Array, "B T"],
    segments: Int[Array, "B T"],
    d2t: Int[Array, " Vd"],
    t2d: Bool[Array, " V"],
) -> tuple[Float[Array, ""], dict[str, Float[Array, " S"]]]:
    """Σ_i 0.8^i · soft-CE of step i against the target's distribution restricted to the draft vocabulary.

    `target_logits[:, j]` is the target's prediction of token j + 1. Step i at position t is scored on token
    t + i + 2, when that token is in t's record and under `loss_mask` (an answer token); the loss also needs the
    target's top token to be in the draft vocabulary (EAGLE's position mask). Each step's loss is a mean over its
    trained positions. Returns the loss and per-step sums that add up across batches (`summarize`): `ce` / `trained`
    (cross-entropy), `hits` / `scored` (the draft's top token, as a target id, equals the target's top token; targets
    outside the draft vocabulary count as misses).
    """
    used = jnp.arange(d2t.shape[0]) + d2t  # target id of each draft id
    base = shift_left(target_logits, 1)  # position t of step 0 predicts token t + 2 from the target's logits at t + 1
    base_top = jnp.argmax(base, axis=-1)
    base_p = jax.nn.softmax(jnp.take(base, used, axis=-1).astype(jnp.float32), axis=-1)
    total = jnp.zeros((), jnp.float32)
    sums = {"ce": [], "trained": [], "hits": [], "scored": []}
    for i, logits in enumerate(step_logits):
        scored = (segments != 0) & (shift_left(segments, i + 2) == segments) & shift_left(loss_mask, i + 2)
        top = shift_left(base_top, i)
        trained = scored & t2d[top]
        ce = -jnp.sum(shift_left(base_p, i) * jax.nn.log_softmax(logits, axis=-1), axis=-1)
        ce_sum, n = jnp.sum(jnp.where(trained, ce, 0.0)), jnp.sum(trained).astype(jnp.float32)
        total = total + STEP_DECAY**i * ce_sum / jnp.maximum(n, 1.0)
        sums["ce"].append(ce_sum)
        sums["trained"].append(n)
        sums["hits"].append(jnp.sum(scored & (used[jnp.argmax(logits, axis=-1)] == top)).astype(jnp.float32))
        sums["scored"].append(jnp.sum(scored).astype(jnp.float32))
    return total, {name: jnp.stack(v) for name, v in sums.items()}


def summarize(sums: dict[str, Float[np.ndarray, " S"]]) -> dict:
    """Loss (weighted like the objective), per-step loss and top-1 accuracy from summed `ttt_loss` statistics."""
    step_loss = np.asarray(sums["ce"]) / np.maximum(np.asarray(sums["trained"]), 1.0)
    acc = np.asarray(sums["hits"]) / np.maximum(np.asarray(sums["scored"]), 1.0)
    weights = STEP_DECAY ** np.arange(step_loss.size)
    return {"loss": float(weights @ step_loss), "step_loss": step_loss.tolist(), "acc": acc.tolist()}
