"""Fused SwiGLU MLP for decode (<= 16 rows) on GPU: down(silu(gate(x)) * up(x)) in one Pallas kernel.

At decode time the MLP is two bandwidth-bound weight streams (gate/up, then down) separated by a tiny elementwise op;
as separate kernels each pays its own ramp-up and tail, and the narrow down projection (N = hidden) cannot fill the
GPU. Here program j owns a slice of the intermediate features: it streams its gate/up rows, forms its slice of the
activation in registers, then streams the matching columns of the down weight and atomically adds its partial
output. One kernel, every weight byte read once.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton
from jaxtyping import Array, Float

ROWS = 16  # tensor-core dots need >= 16 rows; fewer rows are zero-padded (compute is free, bytes are not)


def _kernel(x_ref, gate_up_ref, down_ref, zeros_ref, o_ref, *, rows: int, ffn: int, hidden: int, block_f: int,
            block_k: int, block_d: int, masked_atomics: bool):
    del zeros_ref  # aliased to o_ref: the accumulator starts at zero
    f0 = pl.multiple_of(pl.program_id(0) * block_f, block_f)
    nt = (((1,), (1,)), ((), ()))  # contract the last dims: a @ b^T

    def gate_up_body(i, acc):
        acc_g, acc_u = acc
        k0 = pl.multiple_of(i * block_k, block_k)
        x = x_ref[:, pl.ds(k0, block_k)]
        w_g = gate_up_ref[pl.ds(f0, block_f), pl.ds(k0, block_k)]
        w_u = gate_up_ref[pl.ds(ffn + f0, block_f), pl.ds(k0, block_k)]
        acc_g += jax.lax.dot_general(x, w_g, nt, preferred_element_type=jnp.float32)
        acc_u += jax.lax.dot_general(x, w_u, nt, preferred_element_type=jnp.float32)
        return acc_g, acc_u

    zero = jnp.zeros((ROWS, block_f), jnp.float32)
    acc_g, acc_u = jax.lax.fori_loop(0, hidden // block_k, gate_up_body, (zero, zero))
    act = (acc_g * jax.nn.sigmoid(acc_g) * acc_u).astype(down_ref.dtype)  # [ROWS, block_f]
    row_mask = jax.lax.broadcasted_iota(jnp.int32, (ROWS, block_d), 0) < rows

    @pl.loop(0, hidden // block_d)
    def _(i):
        d0 = pl.multiple_of(i * block_d, block_d)
        w_d = down_ref[pl.ds(d0, block_d), pl.ds(f0, block_f)]  # [block_d, block_f]
        part = jax.lax.dot_general(act, w_d, nt, preferred_element_type=jnp.float32)  # [ROWS, block_d]
        idx = (slice(None), pl.ds(d0, block_d))
        if masked_atomics:  # on GPU: no atomics at all for the zero-padded rows
            pltriton.atomic_add(o_ref, idx, part, mask=row_mask)
        else:  # interpret mode cannot discharge masked atomics; adding zeros gives the same sums
            pltriton.atomic_add(o_ref, idx, jnp.where(row_mask, part, 0.0))


@functools.partial(jax.jit, static_argnames=("block_f", "block_k", "block_d", "num_warps", "num_stages", "interpret"))
def fused_mlp(x: Float[Array, "M D"], gate_up: Float[Array, "F2 D"], down: Float[Array, "D F"], *, block_f: int = 32,
              block_k: int = 256, block_d: int = 256, num_warps: int = 4, num_stages: int = 3,
              interpret: bool = False) -> Float[Array, "M D"]:
    """`gate_up` stacks the gate rows over the up rows (`[2F, D]`), `down` is `[D, F]` (HF layouts)."""
    m, hidden = x.shape
    ffn = down.shape[1]
    if m > ROWS or ffn % block_f or hidden % block_k or hidden % block_d or gate_up.shape != (2 * ffn, hidden):
        raise ValueError(f"fused_mlp: unsupported shapes x {x.shape}, gate_up {gate_up.shape}, down {down.shape}")
    x_pad = jnp.zeros((ROWS, hidden), gate_up.dtype).at[:m].set(x.astype(gate_up.dtype))
    out = pl.pallas_call(
        functools.partial(_kernel, rows=m, ffn=ffn, hidden=hidden, block_f=block_f, block_k=block_k,
                          block_d=block_d, masked_atomics=not interpret),
        out_shape=jax.ShapeDtypeStruct((ROWS, hidden), jnp.float32),
        grid=(ffn // block_f,),
        input_output_aliases={3: 0},
        compiler_params=pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages),
        interpret=interpret,
        name="fused_mlp",
    )(x_pad, gate_up, down, jnp.zeros((ROWS, hidden), jnp.float32))
    return out[:m].astype(x.dtype)


def fused_mlp_reference(x: Float[Array, "M D"], gate_up: Float[Array, "F2 D"], down: Float[Array, "D F"]
                        ) -> Float[Array, "M D"]:
    gate, up = jnp.split(jnp.einsum("md,fd->mf", x, gate_up, preferred_element_type=jnp.float32), 2, axis=-1)
    act = (jax.nn.silu(gate) * up).astype(x.dtype)
    return jnp.einsum("mf,df->md", act, down, preferred_element_type=jnp.float32).astype(x.dtype)
