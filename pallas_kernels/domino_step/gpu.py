"""Correction GEMV + base logits + argmax over the vocabulary as a Triton-lowered Pallas GPU kernel.

One step of the Domino loop reads W2 [V, R] once (78 MB in bf16 for Qwen3's vocabulary): far too much for one program,
so the vocabulary is split into `splits` contiguous chunks, one program per (row block, chunk). A program keeps
`SiLU(pre)` for its rows in registers, walks its chunk tile by tile (`block_v` ids: one [rows, R] x [R, block_v] dot on
tensor cores, plus the base logits), and carries a running (max, id) per row. The per-chunk winners are merged by a
tiny XLA argmax; chunks are in id order, so the first maximal chunk holds the lowest id, as in `jnp.argmax`.

The Pallas Triton backend is deprecated in jax 0.11 (Mosaic GPU is the successor); it still lowers and runs there.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton
from jaxtyping import Array, Float, Int

MIN_ROWS = 16  # tensor-core dot minimum: a single batch row is padded to 16 (masked loads, no copies)
MAX_ROWS = 64  # rows per program: bounds the [rows, block_v] f32 logits tile in registers
TARGET_PROGRAMS = 264  # two waves on an H200 (132 SMs)
NO_ID = jnp.iinfo(jnp.int32).max


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def unsupported(pre: jax.Array, w2: jax.Array) -> str | None:
    """Why this kernel cannot take these shapes (the dispatcher then uses the reference), or None."""
    rank = w2.shape[1]
    if not _pow2(rank) or rank < 16:
        return f"rank {rank} is not a power of two >= 16 (Triton block shapes)"
    if pre.shape[0] < 1:
        return "no rows"
    return None


def default_splits(vocab: int, block_v: int, row_blocks: int) -> int:
    n_tiles = pl.cdiv(vocab, block_v)
    return max(1, min(n_tiles, pl.cdiv(TARGET_PROGRAMS, row_blocks)))


def _kernel(pre_ref, w2_ref, base_ref, val_ref, idx_ref, *, rows: int, vocab: int, block_rows: int, block_v: int,
            chunk: int, precision):
    rb, split = pl.program_id(0), pl.program_id(1)
    r0 = rb * block_rows
    start = split * chunk
    n_tiles = jnp.minimum(chunk // block_v, pl.cdiv(vocab - start, block_v))
    row_ok = r0 + jax.lax.broadcasted_iota(jnp.int32, (block_rows,), 0) < rows
    pre = pltriton.load(pre_ref.at[pl.ds(r0, block_rows), :], mask=row_ok[:, None], other=0.0)
    mid = jax.nn.silu(pre.astype(jnp.float32)).astype(w2_ref.dtype)
    lane = jax.lax.broadcasted_iota(jnp.int32, (block_v,), 0)

    def tile(t, carry):
        best, best_id = carry
        v0 = pl.multiple_of(start + t * block_v, block_v)
        ids = v0 + lane
        ok = ids < vocab
        w = pltriton.load(w2_ref.at[pl.ds(v0, block_v), :], mask=ok[:, None], other=0.0)
        base = pltriton.load(base_ref.at[pl.ds(r0, block_rows), pl.ds(v0, block_v)],
                             mask=row_ok[:, None] & ok[None, :], other=0.0)
        logits = jax.lax.dot_general(mid, w, (((1,), (1,)), ((), ())), precision=precision,
                                     preferred_element_type=jnp.float32) + base.astype(jnp.float32)
        logits = jnp.where(ok[None, :], logits, -jnp.inf)
        m = jnp.max(logits, axis=1)
        j = jnp.min(jnp.where(logits == m[:, None], ids[None, :], NO_ID), axis=1)
        take = m > best  # strict: an earlier tile (lower ids) keeps a tie
        return jnp.where(take, m, best), jnp.where(take, j, best_id)

    init = (jnp.full((block_rows,), -jnp.inf, jnp.float32), jnp.zeros((block_rows,), jnp.int32))
    best, best_id = jax.lax.fori_loop(0, n_tiles, tile, init)
    out = (pl.ds(split, 1), pl.ds(r0, block_rows))
    val_ref[out] = best[None, :]
    idx_ref[out] = best_id[None, :]


@functools.partial(jax.jit, static_argnames=("block_v", "splits", "num_warps", "num_stages", "interpret"))
def correction_argmax_gpu(pre: Float[Array, "B R"], w2: Float[Array, "V R"], base: Float[Array, "B V"], *,
                          block_v: int = 128, splits: int | None = None, num_warps: int = 4, num_stages: int = 2,
                          interpret: bool = False) -> Int[Array, " B"]:
    """`argmax(base + W2 · SiLU(pre))` per row (see reference.py for the numerics); `block_v` a power of two."""
    if reason := unsupported(pre, w2):
        raise ValueError(f"correction_argmax_gpu: {reason}")
    rows, vocab = base.shape
    block_rows = min(MAX_ROWS, max(MIN_ROWS, 1 << (rows - 1).bit_length()))
    row_blocks = pl.cdiv(rows, block_rows)
    splits = splits or default_splits(vocab, block_v, row_blocks)
    chunk = pl.cdiv(pl.cdiv(vocab, block_v), splits) * block_v
    splits = pl.cdiv(vocab, chunk)  # no empty trailing chunks
    # float32 weights: exact products (no TF32), so the kernel agrees with the float32 reference.
    precision = jax.lax.Precision.HIGHEST if w2.dtype == jnp.float32 else None
    part = (splits, row_blocks * block_rows)
    vals, ids = pl.pallas_call(
        functools.partial(_kernel, rows=rows, vocab=vocab, block_rows=block_rows, block_v=block_v, chunk=chunk,
                          precision=precision),
        out_shape=(jax.ShapeDtypeStruct(part, jnp.float32), jax.ShapeDtypeStruct(part, jnp.int32)),
        grid=(row_blocks, splits),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
        interpret=interpret,
        name="domino_correction_argmax",
    )(pre, w2, base)
    best = jnp.argmax(vals[:, :rows], axis=0)
    return jnp.take_along_axis(ids[:, :rows], best[None, :], axis=0)[0]
