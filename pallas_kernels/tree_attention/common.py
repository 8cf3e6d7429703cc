"""Pieces shared by the TPU and GPU kernels: the small tree-window mask and row packing of grouped query heads.

Both kernels walk the cache in KV blocks of `block_k` slots. Blocks entirely below `start` are committed prefix and
need no mask. Only the few blocks that overlap the tree region [start, start + T) are masked, with a mask over just
those blocks ("window"), laid out with KV slots on the last (lane) axis: T x (a few blocks), never T x S.
"""

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from pallas_kernels.tree_attention.reference import visible


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return cdiv(a, b) * b


def num_window_blocks(t: int, block_k: int) -> int:
    """Most KV blocks that T consecutive slots can touch."""
    return (t + block_k - 2) // block_k + 1


def window_mask(start: Int[Array, " B"], block: Bool[Array, "B T T"], block_k: int) -> Bool[Array, "B T W"]:
    """Visibility of the slots of the window blocks, which begin at the block holding `start`.

    Window slots before `start` are prefix (visible), those from `start + T` on are not, so a kernel can apply this
    mask to a whole window block without knowing where in it the tree begins or ends.
    """
    width = num_window_blocks(block.shape[1], block_k) * block_k
    slots = (start // block_k * block_k)[:, None] + jnp.arange(width, dtype=start.dtype)
    return visible(start, block, slots)


def group_queries(q: Float[Array, "B T H D"], kv_heads: int) -> Float[Array, "B K T G D"]:
    """Query heads of one kv head side by side (head h = kv * G + g, as in GQA checkpoints)."""
    b, t, h, d = q.shape
    return q.reshape(b, t, kv_heads, h // kv_heads, d).transpose(0, 2, 1, 3, 4)


def ungroup_queries(o: Float[Array, "B K T G D"]) -> Float[Array, "B T H D"]:
    b, kv_heads, t, g, d = o.shape
    return o.transpose(0, 2, 1, 3, 4).reshape(b, t, kv_heads * g, d)


def pack_rows(q: Float[Array, "B T H D"], kv_heads: int, rows_pad: int) -> Float[Array, "B K R D"]:
    """The T x G queries of each kv head as rows (row = t * G + g), zero-padded to `rows_pad` rows."""
    b, t, h, d = q.shape
    rows = group_queries(q, kv_heads).reshape(b, kv_heads, t * (h // kv_heads), d)
    return jnp.pad(rows, ((0, 0), (0, 0), (0, rows_pad - rows.shape[2]), (0, 0)))


def combine_splits(acc: Float[Array, "B K N R D"], m: Float[Array, "B K N R"], l: Float[Array, "B K N R"], *,
                   base2: bool = False, normalized: bool = False) -> Float[Array, "B K R D"]:
    """Merge the N splits' partial softmax states (output, running max, sum); splits and rows that saw nothing weigh
    0. `base2`: the maxima are in log2 units (a kernel that exponentiates with exp2). `normalized`: each split's
    output is already divided by its own sum (how a kernel stores it in a narrow dtype), so it is weighted by it."""
    m_all = jnp.max(m, axis=2, keepdims=True)
    exp = jnp.exp2 if base2 else jnp.exp
    w = exp(m - jnp.where(m_all == -jnp.inf, 0.0, m_all))
    l_all = jnp.sum(w * l, axis=2)
    o = jnp.sum((w * l if normalized else w)[..., None] * acc.astype(jnp.float32), axis=2)
    return o / jnp.where(l_all == 0.0, 1.0, l_all)[..., None]
