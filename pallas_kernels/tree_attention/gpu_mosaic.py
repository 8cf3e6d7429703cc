"""Tree attention as a Mosaic GPU (sm90: TMA + wgmma) Pallas kernel, split-KV with a combine in XLA.

Rows: the T queries and the G = H // K query heads of one kv head are packed t-major (row = t * G + g), padded to a
multiple of BLOCK_R = 64 rows, one warpgroup's wgmma M. A program owns one 64-row block of one kv head.

Grid (batch, kv head, row block, split). Each row's needed KV blocks (those below start + T, a count read from
`start`) are split evenly over `num_splits` programs ("flash decoding": batch-1 decode has only K programs per row
block otherwise). A program walks its share with dynamic trip counts: unmasked over full prefix blocks, then masked
over the <= 2 blocks holding tree slots. K/V blocks arrive by TMA into a ring of `num_slots` SMEM buffers, issued
num_slots - 1 blocks ahead; each step is S = Q K^T (wgmma, Q and K in SMEM), an online softmax in registers (base 2),
and acc += P V (wgmma, P from registers). wgmma results are awaited within the step, so the slot a step frees is
refilled at the start of the next one.

Masks: the tree-window mask (`common.window_mask`, repeated over the G heads of a row) is a bf16 1 / 0 array laid
out [B x window block, row, block_k], TMA'd once per program that visits masked blocks and applied there as a select.
In those blocks V rows from start + T on are also zeroed in SMEM: the cache there may hold anything (even NaN).

One split writes the normalised output rows (cache dtype); several write (acc, max, sum), merged by
`common.combine_splits` (maxima in base-2 units).

Interpret mode (CPU) runs the same kernel except that P goes through an SMEM buffer: the Mosaic GPU interpreter's
wgmma takes SMEM operands only (and no `run_state`, hence a fresh accumulator per P V plus an add).
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jaxtyping import Array, Bool, Float, Int

from pallas_kernels.tree_attention.common import (cdiv, combine_splits, num_window_blocks, pack_rows, round_up,
                                                 ungroup_queries, window_mask)

BLOCK_R = 64  # rows per program: the M of one warpgroup's wgmma
TARGET_PROGRAMS = 132  # one wave on an H100/H200 (132 SMs)
MIN_SPLIT_BLOCKS = 2  # below this a split's fixed cost (Q and mask loads, pipeline fill) outweighs its KV reads
SMEM_BYTES = 200 * 1024  # of the 227 KiB an sm90 block may use, leaving room for barriers and Mosaic's own scratch
LOG2E = math.log2(math.e)
GRID_NAMES = ("b", "h", "r", "s")


def unsupported(q: jax.Array, k: jax.Array) -> str | None:
    """Why this kernel cannot take these shapes (the caller then uses another kernel), or None.
    `k` is one layer's [B, S, K, D] cache."""
    if q.shape[2] % k.shape[2]:
        return f"{q.shape[2]} query heads are not a multiple of {k.shape[2]} kv heads"
    if q.shape[3] not in (64, 128):
        return f"head dim {q.shape[3]} is not 64 or 128 (whole 128-byte swizzle tiles for wgmma, within SMEM)"
    if k.dtype not in (jnp.bfloat16, jnp.float16):
        return f"cache dtype {k.dtype} is not bfloat16 or float16 (wgmma operands)"
    if k.shape[1] % 64:
        return f"cache length {k.shape[1]} is not a multiple of 64 (the smallest KV block)"
    return None


def default_block_k(t: int, cache_len: int, head_dim: int, itemsize: int) -> int:
    """KV slots per step: 128 halves the steps (and their fixed cost) where SMEM still holds a 3-deep K/V ring."""
    fits = _smem_bytes(t, head_dim, 128, 3, itemsize, partial=True) <= SMEM_BYTES
    return 128 if fits and cache_len % 128 == 0 else 64


def default_num_splits(cache_len: int, block_k: int, programs_per_split: int) -> int:
    """About one wave of programs, and no split shorter than MIN_SPLIT_BLOCKS blocks of a full cache."""
    return max(1, min(TARGET_PROGRAMS // programs_per_split, cache_len // block_k // MIN_SPLIT_BLOCKS))


def _smem_bytes(t: int, head_dim: int, block_k: int, num_slots: int, itemsize: int, partial: bool) -> int:
    """Shared memory of the compiled kernel (the interpreter's extra P buffer is not counted: it has no limit)."""
    q = BLOCK_R * head_dim * itemsize
    kv = 2 * num_slots * block_k * head_dim * itemsize
    mask = num_window_blocks(t, block_k) * BLOCK_R * block_k * 2
    out = (BLOCK_R * head_dim + 2 * BLOCK_R) * 4 if partial else 0
    return q + kv + mask + out


def _transforms(dtype) -> tuple:
    """128-byte swizzled tiles, the layout wgmma reads its SMEM operands in."""
    return (plgpu.TilingTransform((8, 128 // jnp.dtype(dtype).itemsize)), plgpu.SwizzleTransform(128))


def _kernel(start_ref, q_ref, k_ref, v_ref, mask_ref, *refs, t: int, layer: int, block_k: int, num_splits: int,
            num_slots: int, scale: float, partial: bool):
    n_out = 3 if partial else 1
    outs, (q_smem, k_smem, v_smem, mask_smem, part_smem, p_smem, q_bar, mask_bar, k_bar, v_bar) = (refs[:n_out],
                                                                                                  refs[n_out:])
    b, h, r, split = (lax.axis_index(name) for name in GRID_NAMES)
    cache_len, head_dim, dtype = k_ref.shape[2], k_ref.shape[4], k_ref.dtype
    start = start_ref[b]
    end = jnp.minimum(start + t, cache_len)
    n_blocks = cdiv(end, block_k)
    first_masked = jnp.minimum(start // block_k, n_blocks)
    per_split = jnp.maximum(cdiv(n_blocks, num_splits), MIN_SPLIT_BLOCKS)
    lo = jnp.minimum(split * per_split, n_blocks)
    hi = jnp.minimum(lo + per_split, n_blocks)
    rows = pl.ds(r * BLOCK_R, BLOCK_R)

    plgpu.copy_gmem_to_smem(q_ref.at[b, h, rows], q_smem, q_bar)
    visits_masked = hi > jnp.maximum(lo, first_masked)

    @pl.when(visits_masked)
    def _():
        n_window = mask_smem.shape[0]
        plgpu.copy_gmem_to_smem(mask_ref.at[pl.ds(b * n_window, n_window), rows], mask_smem, mask_bar)

    def fetch(kb):
        slot = lax.rem(kb - lo, num_slots)
        kv = (layer, b, pl.ds(kb * block_k, block_k), h)
        plgpu.copy_gmem_to_smem(k_ref.at[kv], k_smem.at[slot], k_bar.at[slot])
        plgpu.copy_gmem_to_smem(v_ref.at[kv], v_smem.at[slot], v_bar.at[slot])

    for i in range(num_slots - 1):  # fill the ring
        pl.when(lo + i < hi)(functools.partial(fetch, lo + i))
    plgpu.barrier_wait(q_bar)
    pl.when(visits_masked)(lambda: plgpu.barrier_wait(mask_bar))

    def step(kb, carry, masked: bool):
        acc, m_prev, l_prev = carry
        slot = lax.rem(kb - lo, num_slots)
        ahead = kb + num_slots - 1
        pl.when(ahead < hi)(functools.partial(fetch, ahead))  # into the slot the previous step freed
        plgpu.barrier_wait(k_bar.at[slot])

        def qk(acc_ref):
            plgpu.wgmma(acc_ref, q_smem, k_smem.at[slot].T)
            return acc_ref[...]

        s = pl.run_scoped(qk, plgpu.ACC((BLOCK_R, block_k), jnp.float32)) * (scale * LOG2E)
        if masked:
            seen = plgpu.load(mask_smem.at[kb - start // block_k], layout=plgpu.Layout.WGMMA)
            s = jnp.where(seen != 0, s, -jnp.inf)  # a select, not a -inf bias: NaN scores past the tree must go
        m_new = jnp.maximum(m_prev, s.max(axis=1))
        m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)  # nothing visible yet: keep l = acc = 0
        alpha = jnp.exp2(m_prev - m_safe)
        p = jnp.exp2(s - lax.broadcast_in_dim(m_safe, s.shape, [0]))
        l_new = alpha * l_prev + p.sum(axis=1)
        acc = acc * lax.broadcast_in_dim(alpha, acc.shape, [0])
        plgpu.barrier_wait(v_bar.at[slot])
        if masked:  # slots from `end` on may hold NaN, and p = 0 there does not cancel it in P V
            v_tile = v_smem.at[slot]
            slot_ids = kb * block_k + plgpu.broadcasted_iota(jnp.int32, v_tile.shape, 0, layout=plgpu.Layout.WGMMA)
            v_tile[...] = jnp.where(slot_ids < end, plgpu.load(v_tile, layout=plgpu.Layout.WGMMA), 0)
            plgpu.commit_smem()  # order the generic-proxy stores before wgmma's async-proxy reads

        if p_smem is not None:  # the interpreter's wgmma takes SMEM operands only
            p_smem[...] = p.astype(dtype)
            plgpu.commit_smem()

        def pv(acc_ref):
            plgpu.wgmma(acc_ref, p.astype(dtype) if p_smem is None else p_smem, v_smem.at[slot])
            return acc_ref[...]

        # A fresh accumulator plus an add, not run_state(ACC.init(acc)): the interpreter cannot run run_state.
        return acc + pl.run_scoped(pv, plgpu.ACC((BLOCK_R, head_dim), jnp.float32)), m_new, l_new

    carry = (plgpu.layout_cast(jnp.zeros((BLOCK_R, head_dim), jnp.float32), plgpu.Layout.WGMMA),
             plgpu.layout_cast(jnp.full((BLOCK_R,), -jnp.inf, jnp.float32), plgpu.Layout.WGMMA.reduce(1)),
             plgpu.layout_cast(jnp.zeros((BLOCK_R,), jnp.float32), plgpu.Layout.WGMMA.reduce(1)))
    carry = lax.fori_loop(lo, jnp.minimum(hi, first_masked), functools.partial(step, masked=False), carry)
    acc, m, l = lax.fori_loop(jnp.maximum(lo, first_masked), hi, functools.partial(step, masked=True), carry)

    if partial:
        acc_ref, m_ref, l_ref = outs
        acc_smem, m_smem, l_smem = part_smem
        acc_smem[...] = acc
        m_smem[...] = m
        l_smem[...] = l
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(acc_smem, acc_ref.at[b, h, split, rows])
        plgpu.copy_smem_to_gmem(m_smem, m_ref.at[b, h, split, rows])
        plgpu.copy_smem_to_gmem(l_smem, l_ref.at[b, h, split, rows])
    else:
        (o_ref,) = outs
        o = acc / lax.broadcast_in_dim(jnp.where(l == 0.0, 1.0, l), acc.shape, [0])  # a row that saw nothing: 0
        q_smem[...] = o.astype(dtype)  # Q is no longer needed: its buffer stages the output
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(q_smem, o_ref.at[b, h, rows])
    plgpu.wait_smem_to_gmem(0)


def _window_mask(start: Int[Array, " B"], block: Bool[Array, "B T T"], groups: int, rows_pad: int,
                 block_k: int) -> Float[Array, "BNW R BK"]:
    """1 (visible) / 0 per (row b's window block, packed row, slot): row t * G + g gets query t's window mask.

    Batch and window blocks share the leading axis: a TMA copy has at most 5 dimensions, and a [NW, 64, 128] slice
    in 128-byte tiles already takes 5 (a separate batch axis made it 6 with block_k 128)."""
    t = block.shape[1]
    mask = jnp.repeat(window_mask(start, block, block_k), groups, axis=1)
    mask = jnp.pad(mask, ((0, 0), (0, rows_pad - t * groups), (0, 0)))
    mask = mask.astype(jnp.bfloat16)  # a 16-bit type loads in the wgmma register layout like the scores
    mask = mask.reshape(mask.shape[0], rows_pad, -1, block_k).transpose(0, 2, 1, 3)
    return mask.reshape(-1, rows_pad, block_k)


@functools.partial(jax.jit, static_argnames=("sm_scale", "layer", "block_k", "num_splits", "num_slots", "interpret"))
def tree_attention_mosaic(q: Float[Array, "B T H D"], k: Float[Array, "*L B S K D"], v: Float[Array, "*L B S K D"],
                          start: Int[Array, " B"], block: Bool[Array, "B T T"], *, sm_scale: float | None = None,
                          layer: int | None = None, block_k: int | None = None, num_splits: int | None = None,
                          num_slots: int | None = None, interpret=False) -> Float[Array, "B T H D"]:
    """See `api.tree_attention`; the tuning arguments default to heuristics for an H200.

    With `layer`, `k` and `v` are a whole [L, B, S, K, D] cache whose layer the kernel reads in place by TMA.
    `interpret`: False compiles for the GPU; True or a `plgpu.InterpretGPUParams` runs the Mosaic GPU interpreter
    (CPU). Tuning: `block_k` KV slots per step (64 or 128), `num_splits` programs per row block over the KV range,
    `num_slots` K/V buffers in the TMA ring (default: as many as fit in SMEM, at most 4).
    """
    if layer is None:
        k, v, layer = k[None], v[None], 0  # a free reshape
    if reason := unsupported(q, k[layer]):
        raise ValueError(f"tree_attention_mosaic: {reason}")
    b, t, h, d = q.shape
    s, kv_heads = k.shape[2], k.shape[3]
    groups = h // kv_heads
    block_k = block_k or default_block_k(t, s, d, k.dtype.itemsize)
    if block_k not in (64, 128) or s % block_k:
        raise ValueError(f"tree_attention_mosaic: block_k {block_k} is not 64 or 128 dividing cache length {s}")
    rows_pad = round_up(t * groups, BLOCK_R)
    n_row_blocks = rows_pad // BLOCK_R
    num_splits = num_splits or default_num_splits(s, block_k, b * kv_heads * n_row_blocks)
    partial = num_splits > 1
    smem = functools.partial(_smem_bytes, t, d, block_k, itemsize=k.dtype.itemsize, partial=partial)
    num_slots = num_slots or max([2] + [n for n in (3, 4) if smem(n) <= SMEM_BYTES])
    if num_slots < 2 or smem(num_slots) > SMEM_BYTES:
        raise ValueError(f"tree_attention_mosaic: {num_slots} K/V slots of {block_k} x {d} exceed shared memory")
    n_window = num_window_blocks(t, block_k)
    scale = d**-0.5 if sm_scale is None else sm_scale
    p_in_smem = interpret not in (False, None)  # compiled, P feeds the second wgmma from registers

    q_rows = pack_rows(q.astype(k.dtype), kv_heads, rows_pad)  # q is small: bring it to the cache dtype
    mask = _window_mask(start, block, groups, rows_pad, block_k)  # the same for every layer (XLA CSE)
    tiles = _transforms(k.dtype)
    scratch = [
        plgpu.SMEM((BLOCK_R, d), k.dtype, transforms=tiles),
        plgpu.SMEM((num_slots, block_k, d), k.dtype, transforms=tiles),
        plgpu.SMEM((num_slots, block_k, d), k.dtype, transforms=tiles),
        plgpu.SMEM((n_window, BLOCK_R, block_k), jnp.bfloat16),
        [plgpu.SMEM((BLOCK_R, d), jnp.float32), plgpu.SMEM((BLOCK_R,), jnp.float32),
         plgpu.SMEM((BLOCK_R,), jnp.float32)] if partial else None,
        plgpu.SMEM((BLOCK_R, block_k), k.dtype, transforms=tiles) if p_in_smem else None,
        plgpu.Barrier(),
        plgpu.Barrier(),
        plgpu.Barrier(num_barriers=num_slots),
        plgpu.Barrier(num_barriers=num_slots),
    ]
    if partial:
        part = (b, kv_heads, num_splits, rows_pad)
        out_type = [jax.ShapeDtypeStruct(part + (d,), jnp.float32), jax.ShapeDtypeStruct(part, jnp.float32),
                    jax.ShapeDtypeStruct(part, jnp.float32)]
    else:
        out_type = [jax.ShapeDtypeStruct((b, kv_heads, rows_pad, d), k.dtype)]
    kernel = functools.partial(_kernel, t=t, layer=layer, block_k=block_k, num_splits=num_splits,
                               num_slots=num_slots, scale=scale, partial=partial)
    out = plgpu.kernel(
        kernel,
        out_type=out_type,
        scratch_types=scratch,
        grid=(b, kv_heads, n_row_blocks, num_splits),
        grid_names=GRID_NAMES,
        kernel_name="tree_attention_mosaic",
        compiler_params=plgpu.CompilerParams(approx_math=True),
        interpret=plgpu.InterpretGPUParams() if interpret is True else (interpret or None),
    )(start.astype(jnp.int32), q_rows, k, v, mask)
    out = combine_splits(*out, base2=True) if partial else out[0]
    out = out[:, :, : t * groups].reshape(b, kv_heads, t, groups, d)
    return ungroup_queries(out).astype(q.dtype)
