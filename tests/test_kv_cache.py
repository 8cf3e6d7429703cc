"""The cache's window write against the per-token scatter it replaces (`BlockMask.write_slots`, padding dropped)."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jspec.models.cache import BlockMask, KVCache, write_new_tokens


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


@pytest.mark.parametrize("batch", [1, 3])
def test_in_bounds_write_skips_the_old_window(batch):
    """A guarded cache (rows hold at most max_len tokens, windows fit in the guard) writes each window without
    reading it: real tokens land as the scatter puts them, padding slots (never committed) become zeros, and
    nothing outside the windows changes."""
    cfg = types.SimpleNamespace(num_layers=2, num_kv_heads=2, head_dim=4)
    rng = np.random.default_rng(batch)
    t = 5
    cache = KVCache.init(cfg, batch, 16, jnp.float32, guard=6)
    guard = cache.guard
    assert cache.max_len == 16 and cache.k.shape[2] == 16 + guard == 128  # widened to the kernels' alignment
    for trial in range(8):
        buf = jnp.asarray(rng.normal(size=cache.k.shape), jnp.float32)
        new = jnp.asarray(rng.normal(size=(batch, t, 2, 4)), jnp.float32)
        start = jnp.asarray(rng.integers(0, cache.max_len + 1, size=batch), jnp.int32)  # the last row may be full
        valid = jnp.asarray(rng.random((batch, t)) < 0.7)
        block = jnp.eye(t, dtype=bool)[None] & valid[:, :, None]
        mask = cache.fits(BlockMask(start=start, block=block))
        assert mask.in_bounds
        got = np.asarray(jax.jit(write_new_tokens, static_argnums=(1, 4))(buf, trial % 2, new, mask, True))
        want = np.asarray(scatter_reference(buf, trial % 2, new, mask))
        for row in range(batch):
            s0 = int(start[row])
            pad = [s0 + j for j in range(t) if not valid[row, j]]
            np.testing.assert_array_equal(got[trial % 2, row, pad], 0.0)
            keep = np.ones(got.shape[2], bool)
            keep[pad] = False
            np.testing.assert_array_equal(got[:, row][:, keep], want[:, row][:, keep])
    assert not cache.fits(BlockMask(start=start, block=jnp.ones((batch, guard + 1, guard + 1), bool))).in_bounds
