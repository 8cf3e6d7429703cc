"""The fused decode MLP Pallas kernel against the pure-JAX reference, in interpret mode on CPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels.fused_mlp.kernel import fused_mlp, fused_mlp_reference


@pytest.mark.parametrize("rows, hidden, ffn, blocks", [(1, 256, 96, (32, 128, 128)), (3, 512, 64, (16, 256, 128)),
                                                       (16, 256, 32, (32, 128, 256)), (5, 384, 48, (16, 128, 128))])
def test_fused_mlp_matches_reference(rows, hidden, ffn, blocks):
    kx, kg, kd = jax.random.split(jax.random.key(rows * 7 + hidden), 3)
    x = jax.random.normal(kx, (rows, hidden))
    gate_up = jax.random.normal(kg, (2 * ffn, hidden)) * 0.05
    down = jax.random.normal(kd, (hidden, ffn)) * 0.05
    block_f, block_k, block_d = blocks
    out = fused_mlp(x, gate_up, down, block_f=block_f, block_k=block_k, block_d=block_d, interpret=True)
    ref = fused_mlp_reference(x, gate_up, down)
    assert out.shape == (rows, hidden)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-5, atol=1e-5)


def test_fused_mlp_rejects_unsupported_shapes():
    x = jnp.zeros((17, 256))
    with pytest.raises(ValueError, match="unsupported shapes"):
        fused_mlp(x, jnp.zeros((64, 256)), jnp.zeros((256, 32)), interpret=True)
