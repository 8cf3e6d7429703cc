"""Prompt Lookup Decoding's n-gram match, jittable: the continuation of the earliest earlier occurrence of the
sequence's last n tokens (n = max_ngram .. 1), as in the reference implementation (algorithms.md §6.4)."""

import jax.numpy as jnp
from jaxtyping import Array, Bool, Int


def lookup(history: Int[Array, "B H"], history_len: Int[Array, " B"], max_ngram: int = 3, num_pred: int = 10
           ) -> tuple[Int[Array, "B P"], Bool[Array, " B"]]:
    """(candidate tokens [B, num_pred], found [B]). Longer n-grams win; among matches the lowest start wins, and
    only matches whose whole `num_pred`-token continuation lies inside the history count."""
    b, h = history.shape
    starts = jnp.arange(h)
    found = jnp.zeros((b,), bool)
    begin = jnp.zeros((b,), jnp.int32)
    for n in range(max_ngram, 0, -1):
        suffix = jnp.take_along_axis(history, jnp.clip(history_len[:, None] - n + jnp.arange(n), 0, h - 1), axis=1)
        match = jnp.ones((b, h), bool)
        for k in range(n):
            shifted = jnp.concatenate([history[:, k:], jnp.full((b, k), -1, history.dtype)], axis=1)
            match &= shifted == suffix[:, k : k + 1]
        match &= (starts[None, :] + n + num_pred <= history_len[:, None]) & (history_len[:, None] >= n)
        hit = jnp.any(match, axis=1)
        take = hit & ~found
        begin = jnp.where(take, jnp.argmax(match, axis=1) + n, begin)
        found |= hit
    idx = jnp.clip(begin[:, None] + jnp.arange(num_pred), 0, h - 1)
    return jnp.take_along_axis(history, idx, axis=1), found
