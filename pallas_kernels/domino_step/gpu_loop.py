"""The candidate-restricted greedy Domino loop with one Triton-lowered Pallas call per draft (GPU).

In XLA, each draft of `domino_draft_candidates` is a chain of small kernels: a W_hh GEMV and a W_s GEMV, the gate
math, the candidates' correction dot, an argmax and a table gather. Each costs a few µs of launch and ramp-up, and a
block has 15 drafts in series. Here draft i is one call:
- Prologue: every program redundantly chooses draft i. It has the state h_i and the products W_hh·h_i and W_s·h_i
  from the previous call; it scores the k candidates, takes the argmax, gathers the token's input gates from the
  table and steps the GRU to h_{i+1}. These inputs are a few tens of KB.
- Body: each program computes one block of rows of [W_hh; W_s]·h_{i+1}, the next call's products. The weight
  (6.8 MB at G = 1024) is spread over all programs.
- Program 0 also writes the token and h_{i+1}.
The last draft needs no next products (one program).

Numerics follow reference.py: the GRU state and gates in float32; products take their vector input rounded to the
weight dtype and accumulate in float32 (elementwise products and sums, not tensor-core dots, since a draft row is a
single vector). The candidate scores sum over the rank in another order than XLA's dot, so exact near-ties may
resolve differently (drafting stays lossless: verification decides). Ties go to the earlier candidate, as
`jnp.argmax`; uncorrected rows (i < prefix_len) take the lowest-id maximum of the base logits, as on the full
vocabulary.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton
from jaxtyping import Array, Float, Int

BLOCK_ROWS = 32  # weight rows per program: 104 programs at G = 1024, R = 256 (an H200 has 132 SMs)
CHUNK = 128  # weight columns per step of a program's row loop: [BLOCK_ROWS, CHUNK] f32 tiles stay in registers
MAX_BATCH = 8  # rows are unrolled in the prologue; larger batches run the XLA loop
NO_ID = jnp.iinfo(jnp.int32).max


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def unsupported(batch: int, candidates: int, rank: int, gru: int) -> str | None:
    """Why the kernel cannot take these shapes (the caller then runs the XLA loop), or None."""
    if batch > MAX_BATCH:
        return f"batch {batch} > {MAX_BATCH}"
    for name, n in (("candidates", candidates), ("rank", rank), ("GRU width", gru)):
        if not _pow2(n) or n < 16:
            return f"{name} {n} is not a power of two >= 16 (Triton block shapes)"
    if gru < CHUNK:
        return f"GRU width {gru} < {CHUNK}"
    return None


def _row_scalar(vec: jax.Array, b: int) -> jax.Array:
    """vec[b] as a scalar (a masked sum: Triton values cannot be indexed)."""
    return jnp.sum(jnp.where(jax.lax.broadcasted_iota(jnp.int32, vec.shape, 0) == b, vec, 0))


def _kernel(h_ref, gh_ref, s_ref, z_ref, cw2_ref, cbase_ref, cids_ref, table_ref, w_hh_ref, w_s_ref,
            tok_ref, h_out_ref, gh_out_ref, s_out_ref, *, i: int, corrected: bool, next_products: bool,
            hh_programs: int, s_rows: int):
    p = pl.program_id(0)
    batch, g = h_ref.shape
    cids = cids_ref[:, i, :]  # draft row i of the block's [B, N, ...] inputs, read in place
    if corrected:
        mid = jax.nn.silu(z_ref[:, i, :] + s_ref[...]).astype(cw2_ref.dtype).astype(jnp.float32)  # [B, R]
        scores = jnp.sum(cw2_ref[:, i, :, :].astype(jnp.float32) * mid[:, None, :], axis=2) + cbase_ref[:, i, :]
        pos = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)
        first = jnp.min(jnp.where(scores == jnp.max(scores, axis=1, keepdims=True), pos, NO_ID), axis=1)
        token = jnp.sum(jnp.where(pos == first[:, None], cids, 0), axis=1)  # [B]
    else:
        base = cbase_ref[:, i, :]
        token = jnp.min(jnp.where(base == jnp.max(base, axis=1, keepdims=True), cids, NO_ID), axis=1)
    token_rows = [_row_scalar(token, b) for b in range(batch)]
    row_of = jax.lax.broadcasted_iota(jnp.int32, (batch, CHUNK), 0)

    def gates(col: int) -> Float[Array, "B C"]:
        """Input gates of the chosen tokens at table columns col .. col + CHUNK (one table row per batch row)."""
        out = jnp.zeros((batch, CHUNK), jnp.float32)
        for b, t in enumerate(token_rows):
            row = table_ref[pl.ds(t, 1), pl.ds(col, CHUNK)].astype(jnp.float32)  # [1, C]
            out = jnp.where(row_of == b, row, out)
        return out

    def h_next(c: int) -> Float[Array, "B C"]:
        """Columns c * CHUNK .. of h_{i+1} = GRU(gates, h_i), from W_hh·h_i of the previous call."""
        c0 = c * CHUNK
        cols = [pl.ds(k * g + c0, CHUNK) for k in range(3)]  # the r, z, n gates' columns
        r = jax.nn.sigmoid(gates(cols[0].start) + gh_ref[:, cols[0]])
        z = jax.nn.sigmoid(gates(cols[1].start) + gh_ref[:, cols[1]])
        n = jnp.tanh(gates(cols[2].start) + r * gh_ref[:, cols[2]])
        return (1.0 - z) * n + z * h_ref[:, pl.ds(c0, CHUNK)]

    @pl.when(p == 0)
    def _():
        tok_ref[...] = token
        for c in range(g // CHUNK):
            h_out_ref[:, pl.ds(c * CHUNK, CHUNK)] = h_next(c)

    def products(w_ref, out_ref, r0, rows: int):
        """out[:, r0 : r0 + rows] = w[r0 : r0 + rows] · h_{i+1}: the vector rounded to the weight dtype, f32 sums."""
        acc = jnp.zeros((batch, rows), jnp.float32)
        for c in range(g // CHUNK):
            x = h_next(c).astype(w_ref.dtype).astype(jnp.float32)  # [B, C]
            w = w_ref[pl.ds(r0, rows), pl.ds(c * CHUNK, CHUNK)].astype(jnp.float32)  # [rows, C]
            acc = acc + jnp.sum(w[None, :, :] * x[:, None, :], axis=2)
        out_ref[:, pl.ds(r0, rows)] = acc

    if next_products:
        @pl.when(p < hh_programs)
        def _():
            products(w_hh_ref, gh_out_ref, pl.multiple_of(p * BLOCK_ROWS, BLOCK_ROWS), BLOCK_ROWS)

        @pl.when(p >= hh_programs)
        def _():
            products(w_s_ref, s_out_ref, pl.multiple_of((p - hh_programs) * s_rows, s_rows), s_rows)


def _step(h, gh, s, z, cw2, cbase, cids, table, w_hh, w_s, *, i: int, corrected: bool, next_products: bool,
          num_warps: int, interpret: bool):
    batch, g = h.shape
    rank = w_s.shape[0]
    s_rows = min(BLOCK_ROWS, rank)
    hh_programs = w_hh.shape[0] // BLOCK_ROWS
    programs = hh_programs + rank // s_rows if next_products else 1
    f32 = jnp.float32
    return pl.pallas_call(
        functools.partial(_kernel, i=i, corrected=corrected, next_products=next_products, hh_programs=hh_programs,
                          s_rows=s_rows),
        out_shape=(jax.ShapeDtypeStruct((batch,), jnp.int32), jax.ShapeDtypeStruct((batch, g), f32),
                   jax.ShapeDtypeStruct((batch, 3 * g), f32), jax.ShapeDtypeStruct((batch, rank), f32)),
        grid=(programs,),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=1),
        interpret=interpret,
        name="domino_candidate_step",
    )(h, gh, s, z, cw2, cbase, cids, table, w_hh, w_s)


@functools.partial(jax.jit, static_argnames=("prefix_len", "num_warps", "interpret"))
def candidate_loop_gpu(cand_base: Float[Array, "B N k"], cand: Int[Array, "B N k"], cand_w2: Float[Array, "B N k R"],
                       z_part: Float[Array, "B N R"], bonus: Int[Array, " B"], table: Float[Array, "V G3"],
                       w_hh: Float[Array, "G3 G"], w_s: Float[Array, "R G"], *, prefix_len: int,
                       num_warps: int = 4, interpret: bool = False) -> Int[Array, "B N"]:
    """Greedy drafts of the candidate-restricted loop (`reference.domino_draft_candidates` with a GRU input table)."""
    b, n, k = cand.shape
    g = w_hh.shape[1]
    if reason := unsupported(b, k, w_s.shape[0], g):
        raise ValueError(f"candidate_loop_gpu: {reason}")
    rows = 1 << (b - 1).bit_length()  # a power of two for Triton's block shapes; padding rows are dropped
    pad = lambda x: jnp.pad(x, [(0, rows - b)] + [(0, 0)] * (x.ndim - 1))  # noqa: E731
    cand_base, cand, cand_w2, z_part, bonus = (pad(x) for x in (cand_base.astype(jnp.float32), cand, cand_w2,
                                                                z_part.astype(jnp.float32), bonus))
    # h_0 reads the bonus token from a zero state; its products come from XLA once per block.
    gi = jnp.take(table, bonus, axis=0).astype(jnp.float32)
    i_r, i_z, i_n = jnp.split(gi, 3, axis=-1)
    h = (1.0 - jax.nn.sigmoid(i_z)) * jnp.tanh(i_n)  # r only multiplies W_hn·0
    gh = jnp.einsum("bg,og->bo", h.astype(w_hh.dtype), w_hh, preferred_element_type=jnp.float32)
    s = jnp.einsum("bg,og->bo", h.astype(w_s.dtype), w_s, preferred_element_type=jnp.float32)
    del i_r
    drafts = []
    for i in range(n):
        last = i == n - 1
        # Whole [B, N, ...] blocks go in, the kernel reads row i: a slice here would be one XLA copy per input.
        token, h_new, gh_new, s_new = _step(h, gh, s, z_part, cand_w2, cand_base, cand, table, w_hh, w_s, i=i,
                                            corrected=i >= prefix_len, next_products=not last,
                                            num_warps=num_warps, interpret=interpret)
        drafts.append(token)
        h, gh, s = h_new, gh_new, s_new
    return jnp.stack(drafts, axis=1)[:b]
