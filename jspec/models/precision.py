"""Mixed precision for training drafters: float32 master weights and optimizer state, matmuls in a compute dtype.

A step casts the float32 parameters to the compute dtype (`cast_params`) before merging the drafter, so its GEMMs
and activations run in bfloat16 while AdamW updates float32 weights (the cast's gradient is an upcast).

Logits and other float32-accumulated products go through `einsum_f32`. Plain `jnp.einsum(...,
preferred_element_type=float32)` on bfloat16 operands differentiates into float32 × bfloat16 products, which XLA runs
by upcasting the bfloat16 operand to float32: for the frozen LM head, a 0.9 GB conversion and a TF32 GEMM in every
loss chunk (on an H200, a fifth of a DFlash step: docs/results/2026-12-02-session18-h200.md). `einsum_f32` rounds
the float32 cotangent to the operands' dtype instead, so the backward GEMMs run like the forward one.
"""

import functools

import jax
import jax.numpy as jnp
from jaxtyping import Array, PyTree

COMPUTE_DTYPES = ("bfloat16", "float32")


def cast_params(params: PyTree, dtype: str) -> PyTree:
    """Floating leaves in `dtype` (others unchanged)."""
    target = jnp.dtype(dtype)
    return jax.tree.map(lambda x: x.astype(target) if jnp.issubdtype(x.dtype, jnp.floating) else x, params)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def einsum_f32(spec: str, x: Array, w: Array) -> Array:
    """`jnp.einsum(spec, x, w)` accumulated and returned in float32; the backward products take the cotangent in the
    operands' dtype (float32 operands: the plain gradient)."""
    return jnp.einsum(spec, x, w, preferred_element_type=jnp.float32)


def _einsum_f32_fwd(spec, x, w):
    return einsum_f32(spec, x, w), (x, w)


def _einsum_f32_bwd(spec, residuals, g):
    x, w = residuals
    g = g.astype(jnp.result_type(x, w))
    (dx,) = jax.linear_transpose(lambda a: jnp.einsum(spec, a, w), x)(g)
    (dw,) = jax.linear_transpose(lambda b: jnp.einsum(spec, x, b), w)(g)
    return dx, dw


einsum_f32.defvjp(_einsum_f32_fwd, _einsum_f32_bwd)
