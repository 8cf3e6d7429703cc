"""Skinny matmul y = x @ W^T for few rows (decode: batch x new tokens <= 16) on GPU, as a split-K Pallas kernel.

XLA's default GEMV for M=1 reaches 0.7-2.0 TB/s on an H200 for the narrow projections of a 1.5B model (see
docs/results/); a decode step is a chain of such weight streams, so it is bandwidth-bound. Each program streams a
`[block_n, block_k]` tile row of W over its share of K; splitting K gives enough programs in flight to fill the SMs
even when N is small. Partial sums `[splits, M, N]` (float32) are reduced by XLA.

W keeps HF's `[N, K]` layout (rows contiguous along K), so tiles are read with full cache lines.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton
from jaxtyping import Array, Float

ROWS = 16  # tensor-core dot needs >= 16 rows; fewer rows are zero-padded (compute is free, bytes are not)


def _kernel(x_ref, w_ref, o_ref, *, block_n: int, block_k: int, k_per_split: int):
    n0 = pl.program_id(0) * block_n
    k_start = pl.program_id(1) * k_per_split

    def body(i, acc):
        k0 = pl.multiple_of(k_start + i * block_k, block_k)
        x = x_ref[:, pl.ds(k0, block_k)]
        w = w_ref[pl.ds(n0, block_n), pl.ds(k0, block_k)]
        return acc + jax.lax.dot_general(x, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)

    acc = jax.lax.fori_loop(0, k_per_split // block_k, body, jnp.zeros((ROWS, block_n), jnp.float32))
    o_ref[...] = acc


def choose_splits(n: int, k: int, block_n: int, block_k: int, target_programs: int = 512) -> int:
    """Most even K split that gives about `target_programs` programs (several per SM keep loads in flight)."""
    chunks = k // block_k
    best = 1
    for s in range(1, chunks + 1):
        if chunks % s == 0 and (n // block_n) * s <= target_programs:
            best = s
    return best


@functools.partial(jax.jit, static_argnames=("block_n", "block_k", "splits", "num_warps", "num_stages", "interpret"))
def skinny_matmul(x: Float[Array, "M K"], w: Float[Array, "N K"], *, block_n: int = 64, block_k: int = 256,
                  splits: int | None = None, num_warps: int = 4, num_stages: int = 3,
                  interpret: bool = False) -> Float[Array, "M N"]:
    m, k = x.shape
    n = w.shape[0]
    if m > ROWS or n % block_n or k % block_k:
        raise ValueError(f"skinny_matmul needs M <= {ROWS}, N % {block_n} == 0, K % {block_k} == 0; got {x.shape} "
                         f"@ {w.shape}^T")
    splits = splits or choose_splits(n, k, block_n, block_k)
    k_per_split = k // splits
    if k_per_split % block_k:
        raise ValueError(f"K={k} does not split into {splits} multiples of {block_k}")
    x_pad = jnp.zeros((ROWS, k), w.dtype).at[:m].set(x.astype(w.dtype))
    partial = pl.pallas_call(
        functools.partial(_kernel, block_n=block_n, block_k=block_k, k_per_split=k_per_split),
        out_shape=jax.ShapeDtypeStruct((splits, ROWS, n), jnp.float32),
        grid=(n // block_n, splits),
        out_specs=pl.BlockSpec((None, ROWS, block_n), lambda i, s: (s, 0, i)),
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
        interpret=interpret,
        name="skinny_matmul",
    )(x_pad, w)
    return jnp.sum(partial, axis=0)[:m].astype(x.dtype)


def skinny_matmul_reference(x: Float[Array, "M K"], w: Float[Array, "N K"]) -> Float[Array, "M N"]:
    return jnp.einsum("mk,nk->mn", x, w, preferred_element_type=jnp.float32).astype(x.dtype)
