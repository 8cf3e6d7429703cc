"""Tree attention as a Mosaic TPU Pallas kernel.

Grid (batch, kv head, query block, KV block); the KV axis is "arbitrary" and carries the online-softmax state (m, l,
acc) in VMEM scratch. `start` is scalar-prefetched into SMEM so the index maps can stop at the row's last needed KV
block: grid steps past it map to the same block (Pallas skips the re-fetch) and do no work, so a short row at a long
cache costs grid-step overhead only, not HBM traffic.

Rows: the G query heads of a kv head are stacked g-major (row = g * T_pad + t), so the [T_pad, block_k] window mask
is simply repeated G times along sublanes. The cache is viewed as [B, S, K * D] (a free reshape) so a kv head's slice
is a lane-aligned BlockSpec when D % 128 == 0; other head dims are zero-padded to 128 first, which copies the cache.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jaxtyping import Array, Bool, Float, Int

from pallas_kernels.tree_attention.common import cdiv, group_queries, num_window_blocks, round_up, window_mask

LANES = 128
MAX_ROWS = 512  # query rows (G * block_q) per grid step: bounds the [rows, block_k] f32 scores in VMEM


def unsupported(q: jax.Array, k: jax.Array) -> str | None:
    """Why this kernel cannot take these shapes (the dispatcher then uses the reference), or None."""
    if q.shape[2] % k.shape[2]:
        return f"{q.shape[2]} query heads are not a multiple of {k.shape[2]} kv heads"
    if k.shape[1] % LANES:
        return f"cache length {k.shape[1]} is not a multiple of {LANES}"
    return None


def default_block_k(cache_len: int) -> int:
    return next(bk for bk in (512, 256, 128) if cache_len % bk == 0)


def _kernel(start_ref, q_ref, k_ref, v_ref, mask_ref, o_ref, m_sc, l_sc, acc_sc, *, t: int, groups: int,
            block_k: int, sm_scale: float):
    b, kb = pl.program_id(0), pl.program_id(3)
    start = start_ref[b]
    end = start + t
    n_blocks = jnp.minimum(cdiv(end, block_k), pl.num_programs(3))
    first_masked = start // block_k

    @pl.when(kb == 0)
    def _init():
        m_sc[...] = jnp.full(m_sc.shape, -jnp.inf, jnp.float32)
        l_sc[...] = jnp.zeros(l_sc.shape, jnp.float32)
        acc_sc[...] = jnp.zeros(acc_sc.shape, jnp.float32)

    def step(masked: bool):
        q = q_ref[...].reshape(-1, q_ref.shape[-1])  # [G * block_q, D]
        k, v = k_ref[...], v_ref[...]
        s = jax.lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32) * sm_scale
        if masked:
            mask = jnp.concatenate([mask_ref[...]] * groups, axis=0) != 0
            s = jnp.where(mask, s, -jnp.inf)
            # Slots from `end` on may hold anything (even NaN): p is 0 there, but 0 * NaN is not.
            slot = kb * block_k + jax.lax.broadcasted_iota(jnp.int32, v.shape, 0)
            v = jnp.where(slot < end, v, jnp.zeros_like(v))
        m_prev = m_sc[...]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
        m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)  # a row with nothing visible yet keeps l = acc = 0
        alpha = jnp.exp(m_prev - m_safe)
        p = jnp.exp(s - m_safe)
        l_sc[...] = alpha * l_sc[...] + jnp.sum(p, axis=1, keepdims=True)
        pv = jax.lax.dot_general(p.astype(v.dtype), v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        acc_sc[...] = alpha * acc_sc[...] + pv
        m_sc[...] = m_new

    pl.when(kb < first_masked)(lambda: step(masked=False))
    pl.when((kb >= first_masked) & (kb < n_blocks))(lambda: step(masked=True))

    @pl.when(kb == pl.num_programs(3) - 1)
    def _finish():
        l = l_sc[...]
        o_ref[...] = (acc_sc[...] / jnp.where(l == 0.0, 1.0, l)).reshape(o_ref.shape).astype(o_ref.dtype)


def _row_blocks(t: int, groups: int, dtype) -> tuple[int, int]:
    """(block_q, T_pad): query rows per grid step and T padded to a multiple of it, both sublane-aligned."""
    sublanes = 32 // jnp.dtype(dtype).itemsize  # 8 for f32, 16 for bf16
    block_q = min(round_up(t, sublanes), max(sublanes, MAX_ROWS // groups // sublanes * sublanes))
    return block_q, round_up(t, block_q)


@functools.partial(jax.jit, static_argnames=("sm_scale", "block_k", "interpret"))
def tree_attention_tpu(q: Float[Array, "B T H D"], k: Float[Array, "B S K D"], v: Float[Array, "B S K D"],
                       start: Int[Array, " B"], block: Bool[Array, "B T T"], *, sm_scale: float | None = None,
                       block_k: int | None = None, interpret=False) -> Float[Array, "B T H D"]:
    """See `api.tree_attention`. `interpret`: False, True or a `pltpu.InterpretParams`."""
    if reason := unsupported(q, k):
        raise ValueError(f"tree_attention_tpu: {reason}")
    b, t, h, d = q.shape
    s, kv_heads = k.shape[1], k.shape[2]
    groups = h // kv_heads
    block_k = block_k or default_block_k(s)
    scale = d**-0.5 if sm_scale is None else sm_scale
    d_pad = round_up(d, LANES)
    block_q, t_pad = _row_blocks(t, groups, q.dtype)
    n_win = num_window_blocks(t, block_k)

    pad_d = ((0, 0), (0, 0), (0, 0), (0, d_pad - d))
    kf = jnp.pad(k, pad_d).reshape(b, s, kv_heads * d_pad)  # no-ops when D % 128 == 0
    vf = jnp.pad(v, pad_d).reshape(b, s, kv_heads * d_pad)
    # q is small: bring it to the cache dtype rather than copying the cache.
    qg = group_queries(q.astype(k.dtype), kv_heads).swapaxes(2, 3)  # [B, K, G, T, D]: g-major rows
    qg = jnp.pad(qg, ((0, 0), (0, 0), (0, 0), (0, t_pad - t), (0, d_pad - d)))
    mask = jnp.pad(window_mask(start, block, block_k), ((0, 0), (0, t_pad - t), (0, 0))).astype(jnp.int32)

    def kv_index(bi, hi, qi, kb, start_ref):
        last = jnp.minimum(cdiv(start_ref[bi] + t, block_k), s // block_k) - 1
        return bi, jnp.minimum(kb, last), hi

    def mask_index(bi, hi, qi, kb, start_ref):
        return bi, qi, jnp.clip(kb - start_ref[bi] // block_k, 0, n_win - 1)

    rows_spec = pl.BlockSpec((None, None, groups, block_q, d_pad), lambda bi, hi, qi, kb, _: (bi, hi, 0, qi, 0))
    kv_spec = pl.BlockSpec((None, block_k, d_pad), kv_index)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(b, kv_heads, t_pad // block_q, s // block_k),
        in_specs=[rows_spec, kv_spec, kv_spec, pl.BlockSpec((None, block_q, block_k), mask_index)],
        out_specs=rows_spec,
        scratch_shapes=[pltpu.VMEM((groups * block_q, 1), jnp.float32), pltpu.VMEM((groups * block_q, 1), jnp.float32),
                        pltpu.VMEM((groups * block_q, d_pad), jnp.float32)],
    )
    out = pl.pallas_call(
        functools.partial(_kernel, t=t, groups=groups, block_k=block_k, sm_scale=scale),
        out_shape=jax.ShapeDtypeStruct(qg.shape, q.dtype),
        grid_spec=grid_spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary")),
        interpret=interpret,
        name="tree_attention_tpu",
    )(start.astype(jnp.int32), qg, kf, vf, mask)
    return out[:, :, :, :t, :d].transpose(0, 3, 1, 2, 4).reshape(b, t, h, d)
