"""Pure-JAX adjacency update: `lax.top_k` per node, then one deterministic scatter of the rows into the table."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int


def topk_reference(logits: Float[Array, "M V"], k: int) -> Int[Array, "M k"]:
    """Descending logits, ties to the lower id (`jax.lax.top_k`'s order)."""
    return jax.lax.top_k(logits, k)[1]


def scatter_rows(table: Int[Array, "V k"], tokens: Int[Array, " M"], valid: Bool[Array, " M"],
                 rows: Int[Array, "M k"]) -> Int[Array, "V k"]:
    """`table[tokens[m]] = rows[m]` for valid m; the last valid occurrence of a token wins; out-of-range tokens skip.

    Losers of a duplicate are routed to distinct out-of-range indices and dropped, so the scatter has unique
    indices and its result does not depend on the backend's write order. The winner of each token is found with a
    scatter-max of positions into a [V] array: O(M + V), so large batches stay cheap.
    """
    vocab = table.shape[0]
    m = tokens.shape[0]
    pos = jnp.arange(m, dtype=jnp.int32)
    valid = valid & (tokens >= 0) & (tokens < vocab)
    last = jnp.full((vocab,), -1, jnp.int32).at[jnp.where(valid, tokens, vocab)].max(pos, mode="drop")
    winner = valid & (last[jnp.clip(tokens, 0, vocab - 1)] == pos)
    dest = jnp.where(winner, tokens, vocab + pos)
    return table.at[dest].set(rows.astype(table.dtype), mode="drop", unique_indices=True)


def adjacency_update_reference(table: Int[Array, "V k"], tokens: Int[Array, " M"], valid: Bool[Array, " M"],
                               logits: Float[Array, "M V"]) -> Int[Array, "V k"]:
    return scatter_rows(table, tokens, valid, topk_reference(logits, table.shape[1]))
