"""Tree attention as a Triton-lowered Pallas GPU kernel (split-KV "flash decoding" + a combine in XLA).

Rows, in one of two layouts (`default_layout`):
- "packed" (decode, short chains and blocks, T < 32): the T queries and the G = H // K query heads of one kv head
  are packed t-major (row = t * G + g) into blocks of `block_r` rows, a power of two >= 16 so both dots run on tensor
  cores even for one-token decode with G = 1;
- "heads" (tree verification, 32 <= T <= 128): the T queries of one query head, read in place from [B, T, H, D].

Grid (batch, kv head, row block, split). Batch-1 decode has only K programs per row block, far too few to pull the
cache at HBM speed, so each row's needed KV blocks (those below start + T, a per-row count read from `start`) are
split evenly over `num_splits` programs. Each loops over its share with a dynamic trip count: unmasked over full
prefix blocks, masked over the <= 2 blocks holding tree slots. Partial (acc, max, sum) are merged by
`common.combine_splits`.

The Pallas Triton backend is deprecated in jax 0.11 (Mosaic GPU is the successor); it still lowers and runs there.
"""

import functools
import os

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton
from jaxtyping import Array, Bool, Float, Int

from pallas_kernels.tree_attention.common import (cdiv, combine_splits, num_window_blocks, pack_rows, round_up,
                                                 ungroup_queries, window_mask)

MIN_ROWS = 16  # tensor-core dot minimum
MAX_ROWS = 128  # rows per program: bounds the f32 accumulator and score tile in registers
# Packed rows per program. For a 60-slot tree of a 6:1 GQA model (360 rows a kv head) 64-row programs at 4 warps, with
# splits for one wave, beat 128-row programs at 8 warps inside the 1.5B's verify step (random weights, H200):
# 1.99 against 2.16 ms at 2K context (docs/results/2026-12-01-session12-h200.md).
PACKED_MAX_ROWS = 64
TARGET_PROGRAMS = 132  # one wave on an H100/H200 (132 SMs)
MIN_SPLIT_BLOCKS = 2  # below this a split's fixed cost (q load, loop setup) outweighs its KV reads
# Partial outputs of this size take about a microsecond to write and merge at HBM speed, so they never limit the splits
# of a short cache: there each program's serial walk over its KV blocks is the cost (in the bench's decode loop, a
# 60-slot tree over a 640-slot cache ran as 6 programs walking every block of their row, 15 µs a call against 6.5 µs
# for decode: docs/results/2026-11-30-session8-h200.md). With the floor it runs 5 splits, 9 µs a call in that loop,
# and Token Recycling's loop step fell from 2.41 to 2.23 ms (docs/results/2026-11-30-session9-h200.md).
PARTIAL_FLOOR_BYTES = 1 << 20
# f32 partial outputs up to this many times the bf16 K/V they summarise: a one-wave split of that 60-slot tree at 2K
# context (11 splits, 2.1x the K/V) measured 8% faster in the step than the 6 splits that a 1x budget allowed.
PARTIAL_KV_RATIO = 4


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def unsupported(q: jax.Array, k: jax.Array) -> str | None:
    """Why this kernel cannot take these shapes (the dispatcher then uses the reference), or None."""
    if q.shape[2] % k.shape[2]:
        return f"{q.shape[2]} query heads are not a multiple of {k.shape[2]} kv heads"
    if not _pow2(q.shape[3]) or q.shape[3] < 16:
        return f"head dim {q.shape[3]} is not a power of two >= 16 (Triton block shapes)"
    if k.shape[1] % MIN_ROWS:
        return f"cache length {k.shape[1]} is not a multiple of {MIN_ROWS}"
    return None


def default_block_k(cache_len: int, block_r: int) -> int:
    """KV slots per step: wide for few rows (decode), narrower when the [block_r, block_k] score tile is large."""
    want = 128 if block_r <= 32 else 64
    return next(bk for bk in (want, want // 2, want // 4, 16) if cache_len % bk == 0)


def default_num_splits(cache_len: int, block_k: int, rows_pad: int, programs_per_split: int, head_dim: int) -> int:
    """About one wave of programs, no split shorter than MIN_SPLIT_BLOCKS blocks of a full cache, and the f32
    partial outputs (splits x rows x D x 4 bytes per kv head) no larger than PARTIAL_KV_RATIO times the bf16 K/V they
    summarise (cache x D x 2 x 2 bytes), or than PARTIAL_FLOOR_BYTES when that is more."""
    partial_budget = max(PARTIAL_KV_RATIO * cache_len * head_dim * 4, PARTIAL_FLOOR_BYTES)
    caps = (TARGET_PROGRAMS // programs_per_split, cache_len // block_k // MIN_SPLIT_BLOCKS,
            partial_budget // (rows_pad * head_dim * 4))
    return max(1, min(caps))


def _attend(start, q, k_ref, v_ref, load_mask, split, *, t: int, block_k: int, num_splits: int, sm_scale: float):
    """Online softmax of the rows `q` over this split's share of the row's KV blocks: (acc, max, sum), unnormalised.
    `load_mask(col)` gives the tree-window mask of window columns col .. col + block_k (int8, rows x block_k)."""
    end = jnp.minimum(start + t, k_ref.shape[0])
    n_blocks = cdiv(end, block_k)
    first_masked = jnp.minimum(start // block_k, n_blocks)
    per_split = jnp.maximum(cdiv(n_blocks, num_splits), MIN_SPLIT_BLOCKS)
    lo = jnp.minimum(split * per_split, n_blocks)
    hi = jnp.minimum(lo + per_split, n_blocks)
    nt = (((1,), (1,)), ((), ()))

    def body(kb, carry, masked: bool):
        acc, m_prev, l_prev = carry
        kv0 = pl.multiple_of(kb * block_k, block_k)
        k = k_ref[pl.ds(kv0, block_k), :]
        v = v_ref[pl.ds(kv0, block_k), :]
        s = jax.lax.dot_general(q, k, nt, preferred_element_type=jnp.float32) * sm_scale
        if masked:
            col = pl.multiple_of((kb - start // block_k) * block_k, block_k)
            s = jnp.where(load_mask(col) != 0, s, -jnp.inf)
            # Slots from `end` on may hold anything (even NaN): p is 0 there, but 0 * NaN is not.
            v = jnp.where((kv0 + jnp.arange(block_k) < end)[:, None], v, jnp.zeros_like(v))
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1))
        m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)  # nothing visible yet: keep l = acc = 0
        alpha = jnp.exp(m_prev - m_safe)
        p = jnp.exp(s - m_safe[:, None])
        pv = jax.lax.dot_general(p.astype(v.dtype), v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        return alpha[:, None] * acc + pv, m_new, alpha * l_prev + jnp.sum(p, axis=1)

    rows, d = q.shape
    carry = (jnp.zeros((rows, d), jnp.float32), jnp.full((rows,), -jnp.inf, jnp.float32),
             jnp.zeros((rows,), jnp.float32))
    carry = jax.lax.fori_loop(lo, jnp.minimum(hi, first_masked), functools.partial(body, masked=False), carry)
    return jax.lax.fori_loop(jnp.maximum(lo, first_masked), hi, functools.partial(body, masked=True), carry)


def _kernel(start_ref, q_ref, k_ref, v_ref, mask_ref, o_ref, m_ref, l_ref, *, t: int, block_k: int,
            num_splits: int, sm_scale: float):
    """Packed layout: a block of (token, query head) rows of one kv head; partial states out."""
    acc, m, l = _attend(start_ref[()], q_ref[...], k_ref, v_ref, lambda col: mask_ref[:, pl.ds(col, block_k)],
                        pl.program_id(3), t=t, block_k=block_k, num_splits=num_splits, sm_scale=sm_scale)
    _store_partial(o_ref, acc, l)
    m_ref[...] = m
    l_ref[...] = l


def _store_partial(o_ref, acc, l):
    """A split's output: as accumulated in f32, or normalised by its own sum when stored narrower (bf16 partials
    would otherwise lose the scale; `combine_splits(normalized=True)` weighs them back)."""
    if o_ref.dtype == jnp.float32:
        o_ref[...] = acc
    else:
        o_ref[...] = (acc / jnp.where(l == 0.0, 1.0, l)[:, None]).astype(o_ref.dtype)


def _kernel_heads(start_ref, q_ref, k_ref, v_ref, mask_ref, *out_refs, t: int, block_k: int, num_splits: int,
                  sm_scale: float):
    """Head layout: the T tokens of one query head as rows, read straight from [B, T, H, D] in a block of the next
    power of two rows (rows from T on are masked, never loaded or stored). One split writes the normalised output
    into [B, T, H, D]; several write partial states."""
    tp = q_ref.shape[0]
    rows_ok = jax.lax.broadcasted_iota(jnp.int32, (tp, 1), 0) < t
    q = pltriton.load(q_ref, mask=rows_ok, other=0.0)
    acc, m, l = _attend(start_ref[()], q, k_ref, v_ref,
                        lambda col: pltriton.load(mask_ref.at[:, pl.ds(col, block_k)], mask=rows_ok, other=0),
                        pl.program_id(2), t=t, block_k=block_k, num_splits=num_splits, sm_scale=sm_scale)
    if num_splits == 1:
        (o_ref,) = out_refs
        o = acc / jnp.where(l == 0.0, 1.0, l)[:, None]  # a row that saw nothing gets zeros
        pltriton.store(o_ref, o.astype(o_ref.dtype), mask=rows_ok)
    else:
        o_ref, m_ref, l_ref = out_refs
        _store_partial(o_ref, acc, l)
        m_ref[...] = m
        l_ref[...] = l


def default_num_stages(t: int) -> int:
    """Software-pipeline depth of the KV loop: 3 for tree verification (1.97 against 1.99 ms for the 1.5B's verify
    step at 2K), 2 for one-token decode as before."""
    return 2 if t == 1 else 3


HEADS_MIN_T = 32  # below this a head's rows fill too little of a program to pay for reading its kv head's K/V alone


def default_layout(t: int) -> str:
    """"heads" for tree verification (HEADS_MIN_T <= T <= 128), "packed" for fewer tokens (decode, chains, blocks).

    Inside the 1.5B's verify(60) step (random weights, H200, 11 splits and 4 warps for both) "heads" measured 1.961
    against 1.976 ms at 2K context and 2.150 against 2.175 ms at 8K: it reads and writes [B, T, H, D] in place, so
    XLA neither pads and transposes the queries in nor transposes the output back
    (docs/results/2026-12-01-session12-h200.md). Each program re-reads its kv head's K/V for one query head's rows,
    so short blocks (a 16-token DFlash block: 16 rows against 96 packed) stay packed. JSPEC_TREE_LAYOUT=packed|heads
    forces one where it applies (heads: 16 <= T <= 128)."""
    choice = os.environ.get("JSPEC_TREE_LAYOUT", "auto")
    if choice not in ("auto", "packed", "heads"):
        raise ValueError(f"JSPEC_TREE_LAYOUT must be 'auto', 'packed' or 'heads', got {choice!r}")
    lowest = {"auto": HEADS_MIN_T, "heads": MIN_ROWS, "packed": MAX_ROWS + 1}[choice]
    return "heads" if lowest <= t <= MAX_ROWS else "packed"


def default_partial_bytes(layout: str) -> int:
    """Bytes per element of the split outputs. 16-bit (normalised per split) for the heads layout, i.e. tree
    verification: on the H200 it took the 1.5B's verify(60) step from 2.157 to 2.132 ms at 8K context and from 1.961
    to 1.941 ms at 2K, real weights (docs/results/2026-12-01-session13-h200.md). The packed layout (decode, DFlash's
    16-token block) keeps float32 partials: not measured there."""
    return 2 if layout == "heads" else 4


TUNING_KEYS = ("block_r", "block_k", "num_splits", "num_warps", "num_stages", "partial_bytes")


def env_tuning(t: int) -> dict[str, int]:
    """Tuning for tree verification (T > 1) from JSPEC_TREE_TUNING, e.g. "block_r=32,block_k=64,num_splits=12":
    how bench/step_breakdown.py --tree-tunings compares configurations inside a real step. Decode (T = 1) keeps
    the heuristics. Read by `api.tree_attention` outside any jit cache; its tuning arguments win over the variable."""
    spec = os.environ.get("JSPEC_TREE_TUNING", "").strip()
    if t == 1 or not spec:
        return {}
    tuning = {}
    for item in spec.split(","):
        key, _, value = item.partition("=")
        key = key.strip()
        if key not in TUNING_KEYS or not value.strip().isdigit() or int(value) < 1:
            raise ValueError(f"JSPEC_TREE_TUNING: {item!r} is not KEY=N with N >= 1 and KEY one of "
                             f"{', '.join(TUNING_KEYS)}")
        tuning[key] = int(value)
    return tuning


@functools.partial(jax.jit, static_argnames=("sm_scale", "layer", "layout", "block_r", "block_k", "num_splits",
                                             "num_warps", "num_stages", "partial_bytes", "interpret"))
def tree_attention_gpu(q: Float[Array, "B T H D"], k: Float[Array, "*L B S K D"], v: Float[Array, "*L B S K D"],
                       start: Int[Array, " B"], block: Bool[Array, "B T T"], *, sm_scale: float | None = None,
                       layer: int | None = None, layout: str | None = None, block_r: int | None = None,
                       block_k: int | None = None, num_splits: int | None = None, num_warps: int | None = None,
                       num_stages: int | None = None, partial_bytes: int | None = None,
                       interpret: bool = False) -> Float[Array, "B T H D"]:
    """See `api.tree_attention`; the tuning arguments default to heuristics for an H200.

    With `layer`, `k` and `v` are a whole [L, B, S, K, D] cache and the kernel reads that layer's blocks in place:
    slicing first would hand the custom call a copy of the layer (two per layer and step).

    `layout` (default `default_layout(T)`):
    - "packed": the T x G queries of a kv head packed into row blocks (`block_r` rows). XLA transposes and pads the
      queries, then merges the splits and unpacks the output.
    - "heads": the T queries of one head as the rows of a program, read and written in place in [B, T, H, D]. With
      one split there is no XLA work around the kernel but the tree mask, which every layer shares; with several,
      one merge.
    """
    if layer is None:
        k, v, layer = k[None], v[None], 0  # a free reshape
    if reason := unsupported(q, k[layer]):
        raise ValueError(f"tree_attention_gpu: {reason}")
    layout = layout or default_layout(q.shape[1])
    if layout not in ("heads", "packed"):
        raise ValueError(f"tree_attention_gpu: layout must be 'heads' or 'packed', got {layout!r}")
    if partial_bytes not in (None, 2, 4):
        raise ValueError(f"tree_attention_gpu: partial_bytes must be 2 or 4, got {partial_bytes}")
    partial_bytes = partial_bytes or default_partial_bytes(layout)
    # Split outputs in the cache's 16-bit dtype halve their HBM round trip (only when the cache is 16-bit).
    partial_dtype = k.dtype if partial_bytes == 2 and k.dtype.itemsize == 2 else jnp.dtype(jnp.float32)
    tuning = dict(sm_scale=sm_scale, layer=layer, block_k=block_k, num_splits=num_splits, num_warps=num_warps,
                  num_stages=num_stages, partial_dtype=partial_dtype, interpret=interpret)
    if layout == "heads":
        return _heads(q, k, v, start, block, **tuning)
    return _packed(q, k, v, start, block, block_r=block_r, **tuning)


def _heads(q, k, v, start, block, *, sm_scale, layer, block_k, num_splits, num_warps, num_stages, partial_dtype,
           interpret):
    b, t, h, d = q.shape
    s, kv_heads = k.shape[2], k.shape[3]
    groups = h // kv_heads
    tp = max(MIN_ROWS, 1 << (t - 1).bit_length())
    block_k = block_k or default_block_k(s, tp)
    num_splits = num_splits or default_num_splits(s, block_k, tp, b * h, d)
    scale = d**-0.5 if sm_scale is None else sm_scale
    mask = window_mask(start, block, block_k).astype(jnp.int8)  # [B, T, W]: the same for every layer (XLA CSE)
    width = mask.shape[2]
    kernel = functools.partial(_kernel_heads, t=t, block_k=block_k, num_splits=num_splits, sm_scale=scale)
    if num_splits == 1:
        out_shape = [jax.ShapeDtypeStruct(q.shape, q.dtype)]
        out_specs = [pl.BlockSpec((None, tp, None, d), lambda bi, hi, si: (bi, 0, hi, 0))]
    else:
        part = (b, h, num_splits, tp)
        out_shape = [jax.ShapeDtypeStruct(part + (d,), partial_dtype), jax.ShapeDtypeStruct(part, jnp.float32),
                     jax.ShapeDtypeStruct(part, jnp.float32)]
        out_specs = [pl.BlockSpec((None, None, None, tp, d), lambda bi, hi, si: (bi, hi, si, 0, 0)),
                     pl.BlockSpec((None, None, None, tp), lambda bi, hi, si: (bi, hi, si, 0)),
                     pl.BlockSpec((None, None, None, tp), lambda bi, hi, si: (bi, hi, si, 0))]
    out = pl.pallas_call(
        kernel,
        out_shape=out_shape,
        grid=(b, h, num_splits),
        in_specs=[
            pl.BlockSpec((None,), lambda bi, hi, si: (bi,)),
            pl.BlockSpec((None, tp, None, d), lambda bi, hi, si: (bi, 0, hi, 0)),
            pl.BlockSpec((None, None, s, None, d), lambda bi, hi, si: (layer, bi, 0, hi // groups, 0)),
            pl.BlockSpec((None, None, s, None, d), lambda bi, hi, si: (layer, bi, 0, hi // groups, 0)),
            pl.BlockSpec((None, tp, width), lambda bi, hi, si: (bi, 0, 0)),
        ],
        out_specs=out_specs,
        compiler_params=pltriton.CompilerParams(num_warps=num_warps or (4 if tp <= 64 else 8),
                                                num_stages=num_stages or default_num_stages(t)),
        interpret=interpret,
        name="tree_attention_gpu_heads",
    )(start.astype(jnp.int32), q.astype(k.dtype), k, v, mask)
    if num_splits == 1:
        return out[0]
    o = combine_splits(*out, normalized=partial_dtype != jnp.float32)[:, :, :t]  # [B, H, T, D]
    return o.transpose(0, 2, 1, 3).astype(q.dtype)


def _packed(q, k, v, start, block, *, sm_scale, layer, block_r, block_k, num_splits, num_warps, num_stages,
            partial_dtype, interpret):
    b, t, h, d = q.shape
    s, kv_heads = k.shape[2], k.shape[3]
    groups = h // kv_heads
    block_r = block_r or min(PACKED_MAX_ROWS, max(MIN_ROWS, 1 << (t * groups - 1).bit_length()))
    if not _pow2(block_r) or block_r < MIN_ROWS:
        raise ValueError(f"tree_attention_gpu: block_r {block_r} is not a power of two >= {MIN_ROWS}")
    rows_pad = round_up(t * groups, block_r)
    n_row_blocks = rows_pad // block_r
    block_k = block_k or default_block_k(s, block_r)
    num_splits = num_splits or default_num_splits(s, block_k, rows_pad, b * kv_heads * n_row_blocks, d)
    scale = d**-0.5 if sm_scale is None else sm_scale

    # q is small: bring it to the cache dtype rather than copying the cache.
    q_rows = pack_rows(q.astype(k.dtype), kv_heads, rows_pad)
    mask = jnp.repeat(window_mask(start, block, block_k), groups, axis=1)  # row t * G + g gets query t's mask
    mask = jnp.pad(mask, ((0, 0), (0, rows_pad - t * groups), (0, 0))).astype(jnp.int8)
    width = num_window_blocks(t, block_k) * block_k

    part = (b, kv_heads, num_splits, rows_pad)
    acc, m, l = pl.pallas_call(
        functools.partial(_kernel, t=t, block_k=block_k, num_splits=num_splits, sm_scale=scale),
        out_shape=[jax.ShapeDtypeStruct(part + (d,), partial_dtype), jax.ShapeDtypeStruct(part, jnp.float32),
                   jax.ShapeDtypeStruct(part, jnp.float32)],
        grid=(b, kv_heads, n_row_blocks, num_splits),
        in_specs=[
            pl.BlockSpec((None,), lambda bi, hi, ri, si: (bi,)),
            pl.BlockSpec((None, None, block_r, d), lambda bi, hi, ri, si: (bi, hi, ri, 0)),
            pl.BlockSpec((None, None, s, None, d), lambda bi, hi, ri, si: (layer, bi, 0, hi, 0)),
            pl.BlockSpec((None, None, s, None, d), lambda bi, hi, ri, si: (layer, bi, 0, hi, 0)),
            pl.BlockSpec((None, block_r, width), lambda bi, hi, ri, si: (bi, ri, 0)),
        ],
        out_specs=[
            pl.BlockSpec((None, None, None, block_r, d), lambda bi, hi, ri, si: (bi, hi, si, ri, 0)),
            pl.BlockSpec((None, None, None, block_r), lambda bi, hi, ri, si: (bi, hi, si, ri)),
            pl.BlockSpec((None, None, None, block_r), lambda bi, hi, ri, si: (bi, hi, si, ri)),
        ],
        compiler_params=pltriton.CompilerParams(num_warps=num_warps or (4 if block_r <= 64 else 8),
                                                num_stages=num_stages or default_num_stages(t)),
        interpret=interpret,
        name="tree_attention_gpu",
    )(start.astype(jnp.int32), q_rows, k, v, mask)
    out = combine_splits(acc, m, l, normalized=partial_dtype != jnp.float32)[:, :, : t * groups]
    out = out.reshape(b, kv_heads, t, groups, d)
    return ungroup_queries(out).astype(q.dtype)
