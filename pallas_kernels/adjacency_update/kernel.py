"""Fused streaming top-k over the vocabulary: each row's logits are read once, tile by tile, into a running top-k.

The running top-k is k (key, id) slots. A tile costs one max-reduction when its best element cannot enter the
running set (the common case once the set holds good values); otherwise elements are moved in one at a time, best
first, each replacing the current worst slot, until the tile's best left over is no longer better than the worst.

Ordering matches `jax.lax.top_k` exactly: descending in the IEEE total order (so +0 > -0; NaN above +inf), ties to
the lower id. Floats are compared as order-preserving int32 keys, which makes that exact and lets the padding of a
partial tile sit below every real value (key INT32_MIN with id NONE).

Two layouts of the same algorithm:
- GPU (Triton): one row per program; the vocabulary is split into `splits` contiguous chunks so that a few rows
  still fill the GPU; each chunk's sorted top-k comes back and a small XLA rank-count merges the [M, splits * k]
  candidates (exact: chunks are in id order and each is sorted by (key desc, id asc)).
- TPU (Mosaic): `block_rows` rows per program, vocabulary tiles along an "arbitrary" grid axis, the running set held
  in the resident output blocks.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as pltriton
from jaxtyping import Array, Float, Int

NONE = jnp.iinfo(jnp.int32).max  # id of padding / already taken elements: never selected
SENTINEL = 1 << 30  # ids of the initial empty slots: above every real id, below NONE
KEY_MIN = jnp.iinfo(jnp.int32).min  # key of padding


def order_key(x: Float[Array, "*S"]) -> Int[Array, "*S"]:
    """int32 keys whose signed order is the IEEE total order of the float32 values (bf16 widens exactly)."""
    bits = jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.int32)
    return jnp.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


def _any(b):
    # Reduce as int32: both backends lower an int max to a scalar; boolean reductions are not universal.
    return jnp.max(b.astype(jnp.int32)) > 0


def _worst(run_key, run_id):
    """The slot that leaves first: lowest key, ties to the highest id. Returns [R, 1] key and id."""
    wk = jnp.min(run_key, axis=1, keepdims=True)
    wi = jnp.max(jnp.where(run_key == wk, run_id, -1), axis=1, keepdims=True)
    return wk, wi


def merge_tile(key, ids, run_key, run_id):
    """Folds a tile (key/ids [R, T], padding = KEY_MIN/NONE) into the running set (run_key/run_id [R, K])."""

    def body(state):
        key, ids, run_key, run_id, best, _ = state
        j = jnp.min(jnp.where(key == best, ids, NONE), axis=1, keepdims=True)  # lowest id among the best
        wk, wi = _worst(run_key, run_id)
        better = (best > wk) | ((best == wk) & (j < wi))  # [R, 1]
        slot = better & (run_key == wk) & (run_id == wi)  # ids are unique, so exactly one slot per better row
        run_key = jnp.where(slot, best, run_key)
        run_id = jnp.where(slot, j, run_id)
        taken = better & (ids == j)
        key = jnp.where(taken, KEY_MIN, key)
        ids = jnp.where(taken, NONE, ids)
        # A row that did not improve never will in this tile (the worst slot only gets better): stop when none did.
        return key, ids, run_key, run_id, jnp.max(key, axis=1, keepdims=True), _any(better)

    best = jnp.max(key, axis=1, keepdims=True)
    wk = jnp.min(run_key, axis=1, keepdims=True)
    go = _any(best >= wk)  # `>=`: an equal key may still win on a lower id
    _, _, run_key, run_id, _, _ = jax.lax.while_loop(lambda s: s[-1], body, (key, ids, run_key, run_id, best, go))
    return run_key, run_id


def empty_run(rows: int, k: int):
    col = jax.lax.broadcasted_iota(jnp.int32, (rows, k), 1)
    return jnp.full((rows, k), KEY_MIN, jnp.int32), SENTINEL + col


def sort_run(run_key, run_id):
    """Orders the k slots by (key desc, id asc): k selection passes over a [R, k] register tile."""
    rows, k = run_key.shape
    col = jax.lax.broadcasted_iota(jnp.int32, (rows, k), 1)
    out_key, out_id = run_key, run_id
    for p in range(k):
        best = jnp.max(run_key, axis=1, keepdims=True)
        j = jnp.min(jnp.where(run_key == best, run_id, NONE), axis=1, keepdims=True)
        out_key = jnp.where(col == p, best, out_key)
        out_id = jnp.where(col == p, j, out_id)
        hit = run_id == j
        run_key = jnp.where(hit, KEY_MIN, run_key)
        run_id = jnp.where(hit, NONE, run_id)
    return out_key, out_id


# ----------------------------------------------------------------------------------------------------------- GPU


def _gpu_kernel(x_ref, key_ref, id_ref, *, vocab: int, k: int, block_v: int, chunk: int):
    row, split = pl.program_id(0), pl.program_id(1)
    start = split * chunk
    n_tiles = jnp.minimum(chunk // block_v, pl.cdiv(vocab - start, block_v))
    lane = jax.lax.broadcasted_iota(jnp.int32, (1, block_v), 1)

    def tile(t, run):
        v0 = pl.multiple_of(start + t * block_v, block_v)
        ids = v0 + lane
        valid = ids < vocab
        x = pltriton.load(x_ref.at[pl.ds(row, 1), pl.ds(v0, block_v)], mask=valid, other=0.0)
        key = jnp.where(valid, order_key(x), KEY_MIN)
        return merge_tile(key, jnp.where(valid, ids, NONE), *run)

    run_key, run_id = sort_run(*jax.lax.fori_loop(0, n_tiles, tile, empty_run(1, k)))
    out = (pl.ds(row, 1), pl.ds(split * k, k))
    key_ref[out] = run_key
    id_ref[out] = run_id


def gpu_splits(rows: int, vocab: int, k: int, block_v: int, target_programs: int = 1024) -> int:
    """Vocabulary chunks per row: enough programs to fill the GPU, each chunk holding at least k real ids."""
    n_tiles = pl.cdiv(vocab, block_v)
    splits = max(1, min(n_tiles, pl.cdiv(target_programs, rows)))
    while splits > 1 and vocab - (splits - 1) * (pl.cdiv(n_tiles, splits) * block_v) < k:
        splits -= 1
    return splits


@functools.partial(jax.jit, static_argnames=("k", "block_v", "splits", "num_warps", "num_stages", "interpret"))
def topk_gpu(logits: Float[Array, "M V"], *, k: int = 8, block_v: int = 2048, splits: int | None = None,
             num_warps: int = 4, num_stages: int = 2, interpret: bool = False) -> Int[Array, "M k"]:
    """Top-k ids per row (Triton). `block_v` and `k` must be powers of two; `splits=None` picks `gpu_splits`."""
    rows, vocab = logits.shape
    splits = splits or gpu_splits(rows, vocab, k, block_v)
    chunk = pl.cdiv(pl.cdiv(vocab, block_v), splits) * block_v
    out = jax.ShapeDtypeStruct((rows, splits * k), jnp.int32)
    keys, ids = pl.pallas_call(
        functools.partial(_gpu_kernel, vocab=vocab, k=k, block_v=block_v, chunk=chunk),
        out_shape=(out, out),
        grid=(rows, splits),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
        interpret=interpret,
        name="adjacency_topk",
    )(logits)
    return ids if splits == 1 else merge_chunks(keys, ids, k)


def merge_chunks(keys: Int[Array, "M P"], ids: Int[Array, "M P"], k: int) -> Int[Array, "M k"]:
    """Top-k of the per-chunk candidates by rank counting (fused compare + reduce over [M, P, P]).

    On equal keys the earlier candidate wins: chunks are in id order and each is sorted, so that is the lower id.
    `lax.top_k` on these int32 keys costs ~30 us on an H200 (a sort) for [60, 120], as much as the kernel itself.
    """
    pos = jnp.arange(keys.shape[1])
    other, mine = keys[:, None, :], keys[:, :, None]
    beaten_by = (other > mine) | ((other == mine) & (pos[None, :] < pos[:, None]))
    rank = jnp.sum(beaten_by, axis=2, dtype=jnp.int32)  # distinct, 0 = best
    hit = rank[:, :, None] == jnp.arange(k)  # [M, P, k]
    return jnp.sum(jnp.where(hit, ids[:, :, None], 0), axis=1)


# ----------------------------------------------------------------------------------------------------------- TPU


def _tpu_kernel(x_ref, key_ref, id_ref, *, vocab: int, block_v: int):
    v = pl.program_id(1)
    rows, k = key_ref.shape

    @pl.when(v == 0)
    def _():
        key_ref[...], id_ref[...] = empty_run(rows, k)

    ids = v * block_v + jax.lax.broadcasted_iota(jnp.int32, x_ref.shape, 1)
    valid = ids < vocab  # the last tile reads past the vocabulary: unspecified values
    key = jnp.where(valid, order_key(x_ref[...]), KEY_MIN)
    key_ref[...], id_ref[...] = merge_tile(key, jnp.where(valid, ids, NONE), key_ref[...], id_ref[...])

    @pl.when(v == pl.num_programs(1) - 1)
    def _():
        key_ref[...], id_ref[...] = sort_run(key_ref[...], id_ref[...])


@functools.partial(jax.jit, static_argnames=("k", "block_rows", "block_v", "interpret"))
def topk_tpu(logits: Float[Array, "M V"], *, k: int = 8, block_rows: int = 16, block_v: int = 2048,
             interpret: bool | pltpu.InterpretParams = False) -> Int[Array, "M k"]:
    """Top-k ids per row (Mosaic TPU). `block_v` a multiple of 128, `block_rows` of 16 (bf16 sublane packing)."""
    rows, vocab = logits.shape
    out = jax.ShapeDtypeStruct((rows, k), jnp.int32)
    out_spec = pl.BlockSpec((block_rows, k), lambda i, v: (i, 0))  # revisited along v: the running set
    _, ids = pl.pallas_call(
        functools.partial(_tpu_kernel, vocab=vocab, block_v=block_v),
        out_shape=(out, out),
        grid=(pl.cdiv(rows, block_rows), pl.cdiv(vocab, block_v)),
        in_specs=[pl.BlockSpec((block_rows, block_v), lambda i, v: (i, v))],
        out_specs=(out_spec, out_spec),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        interpret=interpret,
        name="adjacency_topk",
    )(logits)
    return ids
