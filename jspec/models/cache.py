"""Static-shape KV cache pytree shared by every target and drafter forward."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jspec.config import ModelConfig


GUARD_ALIGN = 128  # the widest KV block of the GPU tree-attention kernel (tree_attention/gpu.py default_block_k)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class KVCache:
    """Keys/values for every layer; slot `s` of row `b` holds the token at position `s` once committed.

    `lengths[b]` counts the committed tokens of row `b`. Forwards write new K/V at explicit slots and never change
    `lengths`: the decode loop (or tree verification) decides what is committed.

    `guard` slots past `max_len` are never committed: a loop that stops a row once it holds `max_len` tokens can
    then write any window of up to `guard` new tokens at the row's length without running off the end, which lets
    `write_new_tokens` skip reading the slots it overwrites (BlockMask.in_bounds).
    """

    k: Float[Array, "L B S K D"]
    v: Float[Array, "L B S K D"]
    lengths: Int[Array, " B"]
    guard: int = dataclasses.field(default=0, metadata=dict(static=True))

    @classmethod
    def init(cls, cfg: ModelConfig, batch: int, max_len: int, dtype=jnp.bfloat16, guard: int = 0) -> "KVCache":
        """A zero cache for rows of up to `max_len` tokens and at least `guard` guard slots; a guard is widened so
        the slot count is a multiple of GUARD_ALIGN (the attention kernels' KV blocks need such lengths)."""
        slots = max_len + guard
        if guard:
            slots = -(-slots // GUARD_ALIGN) * GUARD_ALIGN
        shape = (cfg.num_layers, batch, slots, cfg.num_kv_heads, cfg.head_dim)
        return cls(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype), lengths=jnp.zeros((batch,), jnp.int32),
                   guard=slots - max_len)

    @property
    def max_len(self) -> int:
        """Tokens a row may hold (the guard slots excluded)."""
        return self.k.shape[2] - self.guard

    def fits(self, mask: "BlockMask") -> "BlockMask":
        """`mask`, marked in bounds when its window fits in the guard (rows hold at most `max_len` tokens)."""
        return dataclasses.replace(mask, in_bounds=mask.offset + mask.block.shape[2] <= self.guard)

    @property
    def batch(self) -> int:
        return self.k.shape[1]


@functools.partial(jax.tree_util.register_dataclass, data_fields=["start", "block"],
                   meta_fields=["offset", "in_bounds"])
@dataclasses.dataclass
class BlockMask:
    """Who sees what when T new tokens are run against the cache.

    Every slot below `start[b]` is committed prefix, visible to all new tokens. From `start[b]` on lies a window of
    W slots (W = `block.shape[2]` >= T): new token i sees window slot j iff `block[b, i, j]`, and new token j itself
    is written to window slot `offset + j`. Usually W = T and offset = 0: prefill (start 0, causal block), one-token
    decode (start = length, block [[1]]) and tree verification (block = ancestor mask) — the shape the attention
    kernels take. A wider window lets a drafter grow a tree level by level: level d's tokens are written after the
    earlier levels and see their ancestors among them. Token j is real iff it sees its own slot; padding is written
    nowhere.
    """

    start: Int[Array, " B"]
    block: Bool[Array, "B T W"]
    offset: int = 0
    in_bounds: bool = False  # every row's window lies inside the cache (KVCache.fits), so writes need not read it

    @property
    def valid(self) -> Bool[Array, "B T"]:
        t = self.block.shape[1]
        return jnp.diagonal(self.block[:, :, self.offset : self.offset + t], axis1=1, axis2=2)

    def write_slots(self, max_len: int) -> Int[Array, "B T"]:
        """Cache slot of every new token; `max_len` (out of range: dropped) for padding."""
        t = self.block.shape[1]
        slots = self.start[:, None] + self.offset + jnp.arange(t, dtype=self.start.dtype)
        return jnp.where(self.valid, slots, max_len)

    def dense(self, max_len: int) -> Bool[Array, "B T S"]:
        """The same mask over all `max_len` cache slots (padding rows see nothing)."""
        t, w = self.block.shape[1:]
        rel = jnp.arange(max_len)[None, :] - self.start[:, None]  # [B, S]: index into the window, if in range
        in_window = (rel >= 0) & (rel < w)
        from_block = jnp.take_along_axis(self.block, jnp.clip(rel, 0, w - 1)[:, None, :].repeat(t, 1), axis=2)
        prefix = rel < 0
        return (prefix[:, None, :] | (in_window[:, None, :] & from_block)) & self.valid[:, :, None]

    @property
    def is_square(self) -> bool:
        """The kernels' case: the window is exactly the new tokens."""
        return self.offset == 0 and self.block.shape[1] == self.block.shape[2]


def causal_block_mask(start: Int[Array, " B"], valid: Bool[Array, "B T"]) -> BlockMask:
    """Causal mask for T consecutive new tokens per row (prefill: start 0; decode: T = 1)."""
    t = valid.shape[1]
    causal = jnp.tril(jnp.ones((t, t), bool))
    return BlockMask(start=start, block=causal[None] & valid[:, :, None] & valid[:, None, :])


def write_new_tokens(buf: Float[Array, "L B S K D"], layer: int, new: Float[Array, "B T K D"],
                     mask: BlockMask, window: bool | None = None) -> Float[Array, "L B S K D"]:
    """`buf` with new token j of row b at slot `start[b] + offset + j` of `layer`, as `mask.write_slots` says:
    padding tokens and slots past the end leave the cache as it was.

    Each row's T slots are contiguous, so they are written as one window per row (a dynamic-update-slice at batch 1,
    a window scatter otherwise) rather than a per-token scatter, which costs more on a GPU (tree verification runs
    two per layer). Near the end the window is moved back to fit and the committed slots it then covers keep their
    values.

    `window` (default: on accelerators) picks the window write; XLA:CPU does not update the cache in place under it
    (it reads the old window first), so CPUs keep the per-token scatter. Both write the same (tests/test_kv_cache.py).
    With `mask.in_bounds` the window never moves back, so nothing it covers is committed: padding tokens write
    zeros there instead of the old values, and the old window is not read (on a GPU, two kernels a layer fewer).
    """
    b, t = new.shape[:2]
    s = buf.shape[2]
    if window is None:
        window = jax.default_backend() != "cpu"
    if t > s or not window:  # per-token scatter, which drops what does not fit
        rows = jnp.broadcast_to(jnp.arange(b)[:, None], (b, t))
        return buf.at[layer, rows, mask.write_slots(s)].set(new.astype(buf.dtype), mode="drop")
    first = mask.start.astype(jnp.int32) + mask.offset
    win_start = jnp.clip(first, 0, s - t)
    src = jnp.arange(t)[None, :] - (first - win_start)[:, None]  # [B, T]: the new token landing at each window slot
    src_c = jnp.clip(src, 0, t - 1)
    take = (src >= 0) & jnp.take_along_axis(mask.valid, src_c, axis=1)
    moved = jnp.take_along_axis(new, src_c[:, :, None, None], axis=1).astype(buf.dtype)
    k, d = buf.shape[3:]
    if b == 1:
        at = (layer, 0, win_start[0], 0, 0)
        old = 0 if mask.in_bounds else jax.lax.dynamic_slice(buf, at, (1, 1, t, k, d))[0]
        return jax.lax.dynamic_update_slice(buf, jnp.where(take[..., None, None], moved, old)[None], at)
    old = 0 if mask.in_bounds else jax.vmap(
        lambda row, at: jax.lax.dynamic_slice(row, (at, 0, 0), (t, k, d)))(buf[layer], win_start)
    window = jnp.where(take[..., None, None], moved, old).astype(buf.dtype)
    zeros = jnp.zeros((b,), jnp.int32)
    index = jnp.stack([zeros + layer, jnp.arange(b, dtype=jnp.int32), win_start, zeros, zeros], axis=1)
    dims = jax.lax.ScatterDimensionNumbers(update_window_dims=(1, 2, 3), inserted_window_dims=(0, 1),
                                           scatter_dims_to_operand_dims=(0, 1, 2, 3, 4))
    return jax.lax.scatter(buf, index, window, dims, indices_are_sorted=True, unique_indices=True)
