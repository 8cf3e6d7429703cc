"""The cache's window write against the per-token scatter it replaces (`BlockMask.write_slots`, padding dropped)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jspec.models.cache import BlockMask, write_new_tokens


def scatter_reference(buf, layer, new, mask):
    b, t = new.shape[:2]
    rows = jnp.broadcast_to(jnp.arange(b)[:, None], (b, t))
    return buf.at[layer, rows, mask.write_slots(buf.shape[2])].set(new.astype(buf.dtype), mode="drop")


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("offset", [0, 2])
def test_window_write_matches_scatter(batch, offset):
    layers, slots, t, kv, d = 3, 24, 5, 2, 4
    rng = np.random.default_rng(batch * 10 + offset)
    for trial in range(12):
        buf = jnp.asarray(rng.normal(size=(layers, batch, slots, kv, d)), jnp.float32)
        new = jnp.asarray(rng.normal(size=(batch, t, kv, d)), jnp.float32)
        # Starts anywhere, the cache end included, so that windows cross the end or lie past it.
        start = jnp.asarray(rng.integers(0, slots + 1, size=batch), jnp.int32)
        valid = jnp.asarray(rng.random((batch, t)) < 0.7)
        width = offset + t
        block = jnp.asarray(rng.random((batch, t, width)) < 0.5)
        diag = jnp.zeros((t, width), bool).at[jnp.arange(t), offset + jnp.arange(t)].set(True)
        block = jnp.where(diag[None], valid[:, :, None], block)  # token j is real iff it sees its own slot
        mask = BlockMask(start=start, block=block, offset=offset)
        layer = trial % layers
        got = jax.jit(write_new_tokens, static_argnums=(1, 4))(buf, layer, new, mask, True)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(scatter_reference(buf, layer, new, mask)))


def test_window_wider_than_cache_falls_back_to_scatter():
    buf = jnp.zeros((1, 2, 3, 1, 2))
    new = jnp.ones((2, 5, 1, 2))
    mask = BlockMask(start=jnp.asarray([0, 1]), block=jnp.broadcast_to(jnp.eye(5, dtype=bool), (2, 5, 5)))
    got = write_new_tokens(buf, 0, new, mask, window=True)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(scatter_reference(buf, 0, new, mask)))
    assert float(got.sum()) == 2 * 3 * 2 - 2  # row 0 fills its 3 slots, row 1 the 2 from slot 1
