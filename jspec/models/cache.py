"""Static-shape KV cache pytree shared by every target and drafter forward."""

import dataclasses

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jspec.config import ModelConfig


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class KVCache:
    """Keys/values for every layer; slot `s` of row `b` holds the token at position `s` once committed.

    `lengths[b]` counts the committed tokens of row `b`. Forwards write new K/V at explicit slots and never change
    `lengths`: the decode loop (or tree verification) decides what is committed.
    """

    k: Float[Array, "L B S K D"]
    v: Float[Array, "L B S K D"]
    lengths: Int[Array, " B"]

    @classmethod
    def init(cls, cfg: ModelConfig, batch: int, max_len: int, dtype=jnp.bfloat16) -> "KVCache":
        shape = (cfg.num_layers, batch, max_len, cfg.num_kv_heads, cfg.head_dim)
        return cls(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype), lengths=jnp.zeros((batch,), jnp.int32))

    @property
    def max_len(self) -> int:
        return self.k.shape[2]

    @property
    def batch(self) -> int:
        return self.k.shape[1]


def causal_mask(positions: Int[Array, "B T"], valid: Bool[Array, "B T"], max_len: int) -> Bool[Array, "B T S"]:
    """Slot `s` is visible to a token at position `p` iff `s <= p` (slots hold positions contiguously)."""
    slots = jnp.arange(max_len, dtype=positions.dtype)
    return (slots[None, None, :] <= positions[:, :, None]) & valid[:, :, None]
