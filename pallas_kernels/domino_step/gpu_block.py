"""The candidate-restricted greedy Domino block as one persistent Triton-lowered Pallas call (GPU, batch 1).

XLA's candidate loop is a chain of small kernels per draft (W_hh and W_s GEMVs, gate math, candidate scores, argmax,
table gather), and gpu_loop.py is one launch per draft. With 15 drafts in series, either costs 13% or more of a
decode step on an H200 (docs/results/2026-11-30-kernels-draft-model-h200.md). Here a single launch drafts the whole
block:
- P programs, at most one per SM, so that all of them are resident at once (the grid barrier needs that). Program p
  owns `rows` rows of [W_hh; W_s].
- Every program carries the GRU state h in registers and does the serial part of each draft itself: score the k
  candidates from s_i = W_s·h_i, take the argmax, read the token's input gates from the table, and step the GRU to
  h_{i+1}. Every program computes bit-identical values, because the code and the inputs are the same.
- The parallel part: program p computes its rows of [W_hh; W_s]·h_{i+1} (on CUDA cores) and stores them in slot
  i + 1 of a ring in global memory. Then all programs meet at a grid barrier: a CTA barrier, an acquire-release
  atomic count, and a spin until every program has arrived. After it they read the whole slot. Each slot is written
  once and only read after its barrier, so no SM can hold a stale L1 copy of it.
A program that spins MAX_SPINS times without seeing every arrival gives up and counts itself in `sync[1]`. The
wrapper returns that count, so a broken barrier shows up as a count, not as silently wrong drafts.

`persistent=False` runs the same step code as one launch per draft with no barrier; the launch boundary then orders
the steps. Pallas' CPU interpreter runs the programs of a grid one after another, so it cannot run a spinning
barrier: the CPU tests check the step arithmetic this way, and the GPU test checks the barrier.

Numerics follow reference.py, as gpu_loop.py does: the GRU state and gates are float32, and products take their
vector input rounded to the weight dtype with float32 accumulation. Sums run in another order than XLA's dots, so
exact near-ties may resolve differently; drafting stays lossless, because verification decides.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton
from jaxtyping import Array, Float, Int

MIN_BLOCK = 16  # the smallest weight-row block per program
MAX_SPINS = 1 << 16  # tens of ms of atomic reads: a barrier that has not met by then never will
H200_SMS = 132  # the SM count used when no GPU is attached (lowering tests, interpret mode)
NO_ID = jnp.iinfo(jnp.int32).max


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def block_rows(gru: int, rank: int, num_sms: int) -> int | None:
    """Weight rows per program: the fewest that keep one program per SM (None: no such split)."""
    for rows in (16, 32, 64, 128, 256):
        if (3 * gru) % rows == 0 and 3 * gru // rows + rank // min(rows, rank) <= num_sms:
            return rows
    return None


def unsupported(batch: int, candidates: int, rank: int, gru: int, num_sms: int = H200_SMS) -> str | None:
    """Why the kernel cannot take these shapes (the caller then runs the XLA loop), or None."""
    if batch != 1:
        return f"batch {batch}: the persistent block kernel drafts one row"
    for name, n in (("candidates", candidates), ("rank", rank), ("GRU width", gru)):
        if not _pow2(n) or n < MIN_BLOCK:
            return f"{name} {n} is not a power of two >= {MIN_BLOCK} (Triton block shapes)"
    if block_rows(gru, rank, num_sms) is None:
        return f"[W_hh; W_s] ({3 * gru + rank} rows) does not split over {num_sms} SMs"
    return None


def num_sms() -> int:
    """SMs of the attached GPU (its `core_count`), else an H200's."""
    device = jax.devices()[0]
    if device.platform != "gpu":
        return H200_SMS
    return getattr(device, "core_count", None) or H200_SMS


def _scalar(reduce, vec: jax.Array) -> jax.Array:
    """`reduce` of a [1, X] vector, one axis at a time (Pallas' Triton lowering of a two-axis reduction fails
    under an abstract mesh)."""
    return reduce(reduce(vec, axis=1), axis=0)


def _dot_rows(w: jax.Array, vec: jax.Array) -> jax.Array:
    """[1, rows] = w [rows, X] · vec [1, X]: vec rounded to w's dtype, float32 products summed per row. CUDA cores,
    not a tensor-core dot: a dot needs 16 query rows (15 of them wasted) and a trip through shared memory, and
    measured 22% slower per block on the H200 (docs/results/2026-11-30-session10-h200.md)."""
    v = vec.astype(w.dtype).astype(jnp.float32)
    return jnp.sum(w.astype(jnp.float32) * v, axis=1)[None, :]


def _grid_barrier(sync_ref, target: jax.Array):
    """Returns once `target` arrivals are counted in sync[0] (this program's included), or after MAX_SPINS reads."""
    pltriton.debug_barrier()  # every thread's stores of this step are issued before the release below
    arrived = pltriton.atomic_add(sync_ref, 0, 1) + 1

    def waiting(carry):
        seen, spins = carry
        return (seen < target) & (spins < MAX_SPINS)

    seen, _ = jax.lax.while_loop(waiting, lambda c: (pltriton.atomic_add(sync_ref, 0, 0), c[1] + 1),
                                 (arrived, jnp.int32(0)))
    pltriton.atomic_add(sync_ref, 1, 1, mask=seen < target)
    pltriton.debug_barrier()


def _choose(i, z_ref, s_ref, cw2_ref, cbase_ref, cids_ref, *, prefix_len: int, adaptive: bool
            ) -> tuple[jax.Array, jax.Array]:
    """Draft i (a traced index): the best corrected candidate, or below `prefix_len` the lowest-id maximum of the
    base logits (an argmax over the vocabulary). Both are computed; the unused one costs one small dot. Also its
    confidence (`reference.candidate_confidence`) when `adaptive`, else 1."""
    cids = cids_ref[pl.ds(i, 1), :]  # [1, k]
    cbase = cbase_ref[pl.ds(i, 1), :]
    mid = jax.nn.silu(z_ref[pl.ds(i, 1), :] + s_ref[pl.ds(i, 1), :])  # [1, R]
    scores = _dot_rows(cw2_ref[i, :, :], mid) + cbase  # [1, k]
    pos = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)
    top, base_top = _scalar(jnp.max, scores), _scalar(jnp.max, cbase)
    best = _scalar(jnp.min, jnp.where(scores == top, pos, NO_ID))  # ties: the earlier one
    corrected = _scalar(jnp.sum, jnp.where(pos == best, cids, 0))
    plain = _scalar(jnp.min, jnp.where(cbase == base_top, cids, NO_ID))
    head = i >= prefix_len
    if not adaptive:
        return jnp.where(head, corrected, plain), jnp.float32(1.0)
    confidence = jnp.where(head, 1.0 / _scalar(jnp.sum, jnp.exp(scores - top)),
                           1.0 / _scalar(jnp.sum, jnp.exp(cbase - base_top)))
    return jnp.where(head, corrected, plain), confidence


def _kernel(z_ref, cw2_ref, cbase_ref, cids_ref, table_ref, w_hh_ref, w_s_ref, _tok_in, _gh_in, _s_in, _h_in,
            _sync_in, _conf_in, tok_ref, gh_ref, s_ref, h_ref, sync_ref, conf_ref, *, first: int, last: int,
            persistent: bool, prefix_len: int, stop: float, hh_programs: int, rows: int, s_rows: int):
    """Drafts first .. last - 1, or fewer once the running confidence falls below `stop` (the drafts after keep
    the base argmax the wrapper wrote). A loop, not unrolled Python: one step's code keeps compile time and size
    small."""
    p = pl.program_id(0)
    n, g = h_ref.shape
    programs = hh_programs + w_s_ref.shape[0] // s_rows
    choose = functools.partial(_choose, z_ref=z_ref, s_ref=s_ref, cw2_ref=cw2_ref, cbase_ref=cbase_ref,
                               cids_ref=cids_ref, prefix_len=prefix_len, adaptive=stop > 0)

    def step(carry):
        """Draft i; then, while the head goes on, h_{i+1} and this program's rows of its products (slot i + 1)."""
        i, h, confidence, _ = carry
        token, p_i = choose(i)

        @pl.when(p == 0)
        def _():
            tok_ref[pl.ds(i, 1)] = jnp.full((1,), token, jnp.int32)

        confidence = confidence * p_i
        more = (confidence >= stop) & (i + 1 < n)  # the next draft goes through the head
        gates = [table_ref[pl.ds(token, 1), pl.ds(k * g, g)].astype(jnp.float32) for k in range(3)]  # r, z, n
        hidden = [gh_ref[pl.ds(i, 1), pl.ds(k * g, g)] for k in range(3)]
        r = jax.nn.sigmoid(gates[0] + hidden[0])
        z = jax.nn.sigmoid(gates[1] + hidden[1])
        h = (1.0 - z) * jnp.tanh(gates[2] + r * hidden[2]) + z * h

        @pl.when(more & (p < hh_programs))
        def _():
            r0 = pl.multiple_of(p * rows, rows)
            gh_ref[pl.ds(i + 1, 1), pl.ds(r0, rows)] = _dot_rows(w_hh_ref[pl.ds(r0, rows), :], h)

        @pl.when(more & (p >= hh_programs))
        def _():
            r0 = pl.multiple_of((p - hh_programs) * s_rows, s_rows)
            s_ref[pl.ds(i + 1, 1), pl.ds(r0, s_rows)] = _dot_rows(w_s_ref[pl.ds(r0, s_rows), :], h)

        if persistent:
            @pl.when(more)
            def _():  # every program takes the same branch: their values are bit-identical
                _grid_barrier(sync_ref, programs * (i + 1 - first))
        else:  # the next launch reads h and the confidence from slot i + 1
            @pl.when(more & (p == 0))
            def _():
                h_ref[pl.ds(i + 1, 1), :] = h
                conf_ref[pl.ds(i + 1, 1)] = jnp.full((1,), confidence, jnp.float32)
        return i + 1, h, confidence, more & (i + 1 < last)

    h = h_ref[pl.ds(first, 1), :]  # [1, G]: h_first (slot 0: the bonus token's state)
    confidence = _scalar(jnp.max, conf_ref[pl.ds(first, 1)][None, :])  # slot 0: 1; an unwritten slot: 0
    jax.lax.while_loop(lambda c: c[3], step, (jnp.int32(first), h, confidence, confidence >= stop))


def _call(state, z, cw2, cbase, cids, table, w_hh, w_s, *, first: int, last: int, persistent: bool, prefix_len: int,
          stop: float, rows: int, num_warps: int, interpret: bool):
    rank = w_s.shape[0]
    s_rows = min(rows, rank)
    hh_programs = w_hh.shape[0] // rows
    return pl.pallas_call(
        functools.partial(_kernel, first=first, last=last, persistent=persistent, prefix_len=prefix_len, stop=stop,
                          hh_programs=hh_programs, rows=rows, s_rows=s_rows),
        out_shape=tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in state),
        grid=(hh_programs + rank // s_rows,),
        input_output_aliases={7 + j: j for j in range(len(state))},
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=1),
        interpret=interpret,
        name="domino_candidate_block",
    )(z, cw2, cbase, cids, table, w_hh, w_s, *state)


@functools.partial(jax.jit, static_argnames=("prefix_len", "sms", "num_warps", "persistent", "stop",
                                             "interpret"))
def candidate_block_gpu(cand_base: Float[Array, "1 N k"], cand: Int[Array, "1 N k"], cand_w2: Float[Array, "1 N k R"],
                        z_part: Float[Array, "1 N R"], bonus: Int[Array, " 1"], table: Float[Array, "V G3"],
                        w_hh: Float[Array, "G3 G"], w_s: Float[Array, "R G"], *, prefix_len: int,
                        sms: int = H200_SMS, num_warps: int = 8, persistent: bool = True, stop: float = 0.0,
                        interpret: bool = False) -> tuple[Int[Array, "1 N"], Int[Array, ""]]:
    """Greedy drafts of the candidate-restricted loop (`reference.domino_draft_candidates` with a GRU input table;
    `stop` > 0: `reference.stopping_candidate_loop`, whose early stop ends the kernel's loop), and how many
    programs gave up waiting at a barrier (0 unless the barrier is broken). 8 warps per program: 114 µs per block
    at the 1.5B's head shapes on an H200, against 128 µs with 4."""
    b, n, k = cand.shape
    g = w_hh.shape[1]
    if reason := unsupported(b, k, w_s.shape[0], g, sms):
        raise ValueError(f"candidate_block_gpu: {reason}")
    if persistent and interpret:
        raise ValueError("candidate_block_gpu: the interpreter runs programs in turn, so it cannot run the grid "
                         "barrier; use persistent=False")
    # h_0 reads the bonus token from a zero state; its products come from XLA once per block.
    gi = jnp.take(table, bonus[0], axis=0).astype(jnp.float32)
    h0 = (1.0 - jax.nn.sigmoid(gi[g:2 * g])) * jnp.tanh(gi[2 * g:])  # r only multiplies W_hh·0
    product = lambda w: jnp.einsum("g,og->o", h0.astype(w.dtype), w, preferred_element_type=jnp.float32)  # noqa: E731
    ring = lambda first, width: jnp.zeros((n, width), jnp.float32).at[0].set(first)  # noqa: E731
    # Every draft starts as its row's base argmax (lowest id among the maxima): the drafts a stopped head leaves.
    cand_base = cand_base[0].astype(jnp.float32)
    plain = jnp.min(jnp.where(cand_base == jnp.max(cand_base, axis=-1, keepdims=True), cand[0], NO_ID), axis=-1)
    confidence = jnp.zeros((n,), jnp.float32).at[0].set(1.0)  # slot i: the running confidence before draft i
    state = (plain.astype(jnp.int32), ring(product(w_hh), 3 * g), ring(product(w_s), w_s.shape[0]), ring(h0, g),
             jnp.zeros((2,), jnp.int32), confidence)
    inputs = (z_part[0].astype(jnp.float32), cand_w2[0], cand_base, cand[0], table, w_hh, w_s)
    common = dict(prefix_len=prefix_len, stop=stop, rows=block_rows(g, w_s.shape[0], sms), num_warps=num_warps,
                  interpret=interpret)
    if persistent:
        state = _call(state, *inputs, first=0, last=n, persistent=True, **common)
    else:
        for i in range(n):
            state = _call(state, *inputs, first=i, last=i + 1, persistent=False, **common)
    return state[0][None, :], state[4][1]
