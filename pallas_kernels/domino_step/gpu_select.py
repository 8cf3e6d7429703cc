"""Domino's candidate selection without a sort: each draft row's k best base logits as one Triton-lowered Pallas call.

`reference.chunked_top_k` takes the k best chunk maxima, then the k best entries of those chunks, with two XLA sorts:
39 µs of the head's 138 µs per step at k = 32 on an H200 (docs/results/2026-12-02-session16-h200.md). Here XLA
reduces each chunk to its maximum, and one program per draft row does the rest with counts and prefix sums:

1. the k-th largest chunk maximum, built bit by bit from the top bit of an order-preserving integer key: 32 counts of
   the keys at or above a trial value;
2. the chunks above it, plus the tied ones with the lowest ids, listed in chunk order by a prefix count (the same set
   as `lax.top_k`'s, ties included);
3. exact: the same two steps over those k chunks' entries. Approximate (`exact=False`, as `chunk_max_top_k`): each
   listed chunk's best entry;
4. the W2 rows of the k candidates, gathered into one contiguous block for the head kernel (one XLA gather less).

Lists come out in id order, not best first: the Domino loop only takes argmaxes over them, whose ties then go to the
lower id. Values are the selected logits themselves.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton
from jaxtyping import Array, Float, Int

from pallas_kernels.domino_step.reference import chunk_blocks

INT_MIN = jnp.iinfo(jnp.int32).min
MAX_LIST = 1 << 13  # entries one program holds in registers (chunk maxima, or the k x chunk entries of step 3)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def unsupported(vocab: int, k: int, chunk: int, rank: int) -> str | None:
    """Why the kernel cannot take these shapes (the caller then runs the XLA selection), or None."""
    num_chunks = -(-vocab // chunk)
    if k * chunk >= vocab or k >= num_chunks:
        return f"{k} candidates in chunks of {chunk} need more than {vocab} entries"
    if chunk & (chunk - 1) or k & (k - 1) or rank & (rank - 1):
        return f"chunk {chunk}, k {k} and rank {rank} must be powers of two (Triton block shapes)"
    if _pow2_at_least(num_chunks) > MAX_LIST or k * chunk > MAX_LIST:
        return f"{num_chunks} chunks (or {k} x {chunk} entries) exceed one program's {MAX_LIST}"
    return None


def _whole_lines(entries: int) -> int:
    """A row width of whole 128-byte cache lines (32 four-byte entries): no line holds two programs' rows."""
    return -(-entries // 32) * 32


def _keys(x: jax.Array) -> jax.Array:
    """int32 keys in the order of the float32 values (negative floats have their magnitude bits flipped)."""
    bits = jax.lax.bitcast_convert_type(x, jnp.int32)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


def _sum(x: jax.Array) -> jax.Array:
    """Sum over every axis, one axis at a time (a multi-axis reduction does not lower under an abstract mesh)."""
    while x.ndim:
        x = jnp.sum(x, axis=x.ndim - 1)
    return x


def _kth_largest(keys: jax.Array, k: int) -> jax.Array:
    """The k-th largest key: the largest t with count(keys >= t) >= k, set bit by bit from the top. The trial values
    are built in offset binary (t ^ INT_MIN), so that bit 31 is the most significant like the others."""

    def bit(b, offset):
        trial = offset | (jnp.int32(1) << (31 - b))  # bit 31 first: 1 << 31 is INT_MIN
        enough = _sum((keys >= (trial ^ INT_MIN)).astype(jnp.int32)) >= k
        return jnp.where(enough, trial, offset)

    return jax.lax.fori_loop(0, 32, bit, jnp.int32(0)) ^ INT_MIN


def _selected(keys: jax.Array, k: int, axis_cumsum) -> tuple[jax.Array, jax.Array]:
    """(taken mask, position in the list) of the k largest keys; of equal keys, the first ones in list order."""
    kth = _kth_largest(keys, k)
    above = keys > kth
    tied = keys == kth
    need = k - _sum(above.astype(jnp.int32))
    take = above | (tied & (axis_cumsum(tied.astype(jnp.int32)) <= need))
    return take, axis_cumsum(take.astype(jnp.int32)) - 1


def _cumsum_2d(x: jax.Array) -> jax.Array:
    """Inclusive prefix sum of a [rows, cols] array in row-major order."""
    along = jnp.cumsum(x, axis=1)
    row_totals = jnp.sum(x, axis=1)
    before = jnp.cumsum(row_totals, axis=0) - row_totals
    return along + before[:, None]


def _read_back(ref, row, k: int) -> jax.Array:
    """The first k entries of a row this program has just written, after a CTA barrier. Only this program touches
    its row, and rows are whole cache lines (the wrapper's widths), so no SM can hold a stale copy of them."""
    return ref[row, pl.ds(0, k)]


def _kernel(max_ref, base_ref, w2_ref, val_ref, id_ref, cw2_ref, chunk_ref, *, k: int, chunk: int, num_chunks: int,
            vocab: int, width: int, exact: bool, interpret: bool):
    row = pl.program_id(0)
    barrier = (lambda: None) if interpret else pltriton.debug_barrier  # (the CPU interpreter runs code in order)
    lane = jax.lax.broadcasted_iota(jnp.int32, (width,), 0)
    listed = jax.lax.broadcasted_iota(jnp.int32, (k,), 0)
    real = lane < num_chunks
    maxima = jnp.where(real, max_ref[row, jnp.minimum(lane, num_chunks - 1)], -jnp.inf)
    keys = jnp.where(real, _keys(maxima), INT_MIN)  # padding sorts below every real key (-inf included)
    take, pos = _selected(keys, k, lambda x: jnp.cumsum(x, axis=0))
    # Every entry lands in a distinct slot: the taken ones in 0 .. k - 1, the rest past k (dropped by the wrapper).
    chunk_ref[row, jnp.where(take, pos, k + lane)] = lane
    barrier()  # the list is read back by other threads
    chunks = _read_back(chunk_ref, row, k)  # [k], ascending
    tokens = chunks[:, None] * chunk + jax.lax.broadcasted_iota(jnp.int32, (k, chunk), 1)
    logits = jnp.where(tokens < vocab, base_ref[row, jnp.minimum(tokens, vocab - 1)], -jnp.inf)  # [k, chunk]
    if exact:
        flat = jax.lax.broadcasted_iota(jnp.int32, (k, chunk), 0) * chunk + jax.lax.broadcasted_iota(
            jnp.int32, (k, chunk), 1)
        take2, pos2 = _selected(jnp.where(tokens < vocab, _keys(logits), INT_MIN), k, _cumsum_2d)
        slot = jnp.where(take2, pos2, k + flat)
        val_ref[row, slot] = logits
        id_ref[row, slot] = tokens
        barrier()
        ids = _read_back(id_ref, row, k)
    else:
        best = jnp.max(logits, axis=1)
        ids = jnp.min(jnp.where(logits == best[:, None], tokens, jnp.iinfo(jnp.int32).max), axis=1)
        val_ref[row, listed] = best
        id_ref[row, listed] = ids
    # The candidates' W2 rows, contiguous for the head kernel's serial loop.
    rank = jax.lax.broadcasted_iota(jnp.int32, (k, w2_ref.shape[1]), 1)
    cw2_ref[row, listed[:, None], rank] = w2_ref[ids[:, None], rank]


@functools.partial(jax.jit, static_argnames=("k", "chunk", "exact", "num_warps", "interpret"))
def select_candidates_gpu(base: Float[Array, "N V"], w2: Float[Array, "V R"], *, k: int, chunk: int = 64,
                          exact: bool = True, num_warps: int = 4, interpret: bool = False
                          ) -> tuple[Float[Array, "N k"], Int[Array, "N k"], Float[Array, "N k R"]]:
    """(values, ids, W2 rows) of each row's k best entries (`exact`; the set `lax.top_k` returns) or of
    `chunk_max_top_k`'s approximation (the best entry of each of the k chunks with the highest maxima), in id order."""
    n, vocab = base.shape
    if reason := unsupported(vocab, k, chunk, w2.shape[1]):
        raise ValueError(f"select_candidates_gpu: {reason}")
    num_chunks = -(-vocab // chunk)
    maxima = jnp.max(chunk_blocks(base, k, chunk), axis=-1)  # unsupported() ruled out a None
    width = _pow2_at_least(num_chunks)
    lists = _whole_lines(k + (k * chunk if exact else 0))  # past k: where the exact step's untaken entries land
    values, ids, cand_w2, _ = pl.pallas_call(
        functools.partial(_kernel, k=k, chunk=chunk, num_chunks=num_chunks, vocab=vocab, width=width, exact=exact,
                          interpret=interpret),
        out_shape=(jax.ShapeDtypeStruct((n, lists), jnp.float32), jax.ShapeDtypeStruct((n, lists), jnp.int32),
                   jax.ShapeDtypeStruct((n, k, w2.shape[1]), w2.dtype),
                   jax.ShapeDtypeStruct((n, _whole_lines(k + width)), jnp.int32)),
        grid=(n,),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=1),
        interpret=interpret,
        name="domino_select_candidates",
    )(maxima, base.astype(jnp.float32), w2)
    return values[:, :k], ids[:, :k], cand_w2
