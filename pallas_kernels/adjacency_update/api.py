"""Adjacency update entry point: picks the fused top-k kernel for the platform, or the pure-JAX reference."""

import jax
import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu
from jaxtyping import Array, Bool, Float, Int

from pallas_kernels.adjacency_update import kernel
from pallas_kernels.adjacency_update.reference import scatter_rows, topk_reference

GPU_PLATFORMS = ("gpu", "cuda", "rocm")
KERNEL_PLATFORMS = (*GPU_PLATFORMS, "tpu")


def kernel_supported(rows: int, vocab: int, k: int, dtype) -> bool:
    """The kernels need a power-of-two k (Triton register tiles), a float dtype, and at least k ids per row."""
    return (rows > 0 and 0 < k <= 128 and k & (k - 1) == 0 and vocab >= k and vocab < kernel.SENTINEL
            and jnp.issubdtype(dtype, jnp.floating) and jnp.dtype(dtype).itemsize <= 4)


def topk_indices(logits: Float[Array, "M V"], k: int = 8, *, platform: str | None = None,
                 interpret: bool | pltpu.InterpretParams = False) -> Int[Array, "M k"]:
    """Top-k ids per row, `jax.lax.top_k` order. `platform` picks the kernel flavour (default: the default backend);
    `interpret` runs that kernel on the host, so on CPU the kernels only run when it is set."""
    platform = platform or jax.default_backend()
    rows, vocab = logits.shape
    if kernel_supported(rows, vocab, k, logits.dtype):
        if platform in GPU_PLATFORMS:
            return kernel.topk_gpu(logits, k=k, interpret=bool(interpret))
        if platform == "tpu":
            return kernel.topk_tpu(logits, k=k, interpret=interpret)
    return topk_reference(logits, k)


def adjacency_update(table: Int[Array, "V k"], tokens: Int[Array, " M"], valid: Bool[Array, " M"],
                     logits: Float[Array, "M V"], *, platform: str | None = None,
                     interpret: bool | pltpu.InterpretParams = False) -> Int[Array, "V k"]:
    """Overwrites the rows of the valid tokens with their top-k successors; the last valid duplicate wins."""
    rows = topk_indices(logits, table.shape[1], platform=platform, interpret=interpret)
    return scatter_rows(table, tokens, valid, rows)
