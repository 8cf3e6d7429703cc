"""Correction GEMV + base logits + argmax over the vocabulary as a Mosaic TPU Pallas kernel.

Grid (row block, vocabulary tile); the tile axis is "arbitrary" and the running (max, id) per row lives in the
resident output blocks, as in the adjacency top-k kernel. Each grid step streams one [block_v, R] tile of W2 and the
matching [rows, block_v] base logits through VMEM (Pallas double-buffers them), so W2 is read once per step for all
rows. The last tile may read past the vocabulary (unspecified values): those ids are masked to -inf.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jaxtyping import Array, Float, Int

LANES = 128
MAX_ROWS = 16  # rows per block: a multiple of 8 (f32) and 16 (bf16 sublane packing); fewer rows take the full dim
NO_ID = jnp.iinfo(jnp.int32).max


def unsupported(block_v: int) -> str | None:
    if block_v % LANES:
        return f"block_v {block_v} is not a multiple of {LANES}"
    return None


def _kernel(pre_ref, w2_ref, base_ref, val_ref, idx_ref, *, vocab: int, block_v: int):
    v = pl.program_id(1)

    @pl.when(v == 0)
    def _init():
        val_ref[...] = jnp.full(val_ref.shape, -jnp.inf, jnp.float32)
        idx_ref[...] = jnp.zeros(idx_ref.shape, jnp.int32)

    mid = jax.nn.silu(pre_ref[...].astype(jnp.float32)).astype(w2_ref.dtype)
    logits = jax.lax.dot_general(mid, w2_ref[...], (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    logits = logits + base_ref[...].astype(jnp.float32)
    ids = v * block_v + jax.lax.broadcasted_iota(jnp.int32, logits.shape, 1)
    logits = jnp.where(ids < vocab, logits, -jnp.inf)
    m = jnp.max(logits, axis=1, keepdims=True)
    j = jnp.min(jnp.where(logits == m, ids, NO_ID), axis=1, keepdims=True)
    take = m > val_ref[...]  # strict: an earlier tile (lower ids) keeps a tie
    val_ref[...] = jnp.where(take, m, val_ref[...])
    idx_ref[...] = jnp.where(take, j, idx_ref[...])


@functools.partial(jax.jit, static_argnames=("block_v", "interpret"))
def correction_argmax_tpu(pre: Float[Array, "B R"], w2: Float[Array, "V R"], base: Float[Array, "B V"], *,
                          block_v: int = 2048, interpret: bool | pltpu.InterpretParams = False) -> Int[Array, " B"]:
    """`argmax(base + W2 · SiLU(pre))` per row (see reference.py for the numerics); `block_v` a multiple of 128."""
    if reason := unsupported(block_v):
        raise ValueError(f"correction_argmax_tpu: {reason}")
    rows, vocab = base.shape
    rank = w2.shape[1]
    block_rows = rows if rows <= MAX_ROWS else MAX_ROWS
    block_v = min(block_v, pl.cdiv(vocab, LANES) * LANES)
    out = jax.ShapeDtypeStruct((rows, 1), jnp.float32)
    out_spec = pl.BlockSpec((block_rows, 1), lambda i, v: (i, 0))  # revisited along v: the running max
    _, idx = pl.pallas_call(
        functools.partial(_kernel, vocab=vocab, block_v=block_v),
        out_shape=(out, jax.ShapeDtypeStruct((rows, 1), jnp.int32)),
        grid=(pl.cdiv(rows, block_rows), pl.cdiv(vocab, block_v)),
        in_specs=[pl.BlockSpec((block_rows, rank), lambda i, v: (i, 0)),
                  pl.BlockSpec((block_v, rank), lambda i, v: (v, 0)),
                  pl.BlockSpec((block_rows, block_v), lambda i, v: (i, v))],
        out_specs=(out_spec, out_spec),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        interpret=interpret,
        name="domino_correction_argmax",
    )(pre, w2, base)
    return idx[:, 0]
