"""Pure-JAX tree attention: the semantics every kernel in this package is tested against.

Query i of row b sees cache slot s iff s is committed prefix (`s < start[b]`) or s is slot j = s - start[b] of the
window (`j < W`, the block's last dimension, usually W = T) and `block[b, i, j]`. Slots from `start[b] + W` on are
never visible. A query that sees nothing (a padding
row at start 0) gets zeros.
"""

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int


def visible(start: Int[Array, " B"], block: Bool[Array, "B T T"], slots: Int[Array, "B W"]) -> Bool[Array, "B T W"]:
    """Whether each query sees each of the given cache slots (any slots: the whole cache or a kernel's window)."""
    b, t, w = block.shape  # w >= t: a window of slots from `start` (the new tokens, plus earlier draft-tree nodes)
    rel = slots - start[:, None]  # index into the window, when in [0, W)
    in_tree = (rel >= 0) & (rel < w)
    idx = jnp.broadcast_to(jnp.clip(rel, 0, w - 1)[:, None, :], (b, t, slots.shape[1]))
    tree = jnp.take_along_axis(block, idx, axis=2)
    return (rel < 0)[:, None, :] | (in_tree[:, None, :] & tree)


def masked_softmax(scores: Float[Array, "... S"], mask: Bool[Array, "... S"]) -> Float[Array, "... S"]:
    """Softmax over visible entries in f32; rows with nothing visible give all zeros instead of NaN."""
    scores = jnp.where(mask, scores.astype(jnp.float32), -jnp.inf)
    m = jnp.max(scores, axis=-1, keepdims=True)
    p = jnp.exp(scores - jnp.where(jnp.isfinite(m), m, 0.0))
    l = jnp.sum(p, axis=-1, keepdims=True)
    return p / jnp.where(l == 0.0, 1.0, l)


def tree_attention_reference(q: Float[Array, "B T H D"], k: Float[Array, "B S K D"], v: Float[Array, "B S K D"],
                             start: Int[Array, " B"], block: Bool[Array, "B T T"], *,
                             sm_scale: float | None = None) -> Float[Array, "B T H D"]:
    """Dense GQA attention over the whole cache under the prefix + tree mask (XLA; the fallback everywhere)."""
    b, t, h, d = q.shape
    s, kv_heads = k.shape[1], k.shape[2]
    scale = d**-0.5 if sm_scale is None else sm_scale
    mask = visible(start, block, jnp.broadcast_to(jnp.arange(s, dtype=start.dtype), (b, s)))
    qg = q.reshape(b, t, kv_heads, h // kv_heads, d)
    scores = jnp.einsum("btkgd,bskd->bkgts", qg, k, preferred_element_type=jnp.float32) * scale
    probs = masked_softmax(scores, mask[:, None, None])
    out = jnp.einsum("bkgts,bskd->btkgd", probs.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return out.reshape(b, t, h, d).astype(q.dtype)
