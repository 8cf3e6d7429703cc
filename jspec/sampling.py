"""Token selection from logits: greedy, or temperature + top-p sampling."""

import dataclasses
import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jspec.errors import UserError


@dataclasses.dataclass(frozen=True)
class Sampling:
    """Static (hashable) sampling settings; temperature 0 means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0

    def __post_init__(self):
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise UserError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise UserError(f"top-p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def target_probs(logits: Float[Array, "... V"], sampling: Sampling) -> Float[Array, "... V"]:
    """The distribution tokens are drawn from: softmax(logits / T), restricted to the top-p nucleus."""
    probs = jax.nn.softmax(logits.astype(jnp.float32) / sampling.temperature, axis=-1)
    if sampling.top_p < 1.0:
        sorted_probs = jnp.sort(probs, axis=-1)[..., ::-1]
        cumulative = jnp.cumsum(sorted_probs, axis=-1)
        # Keep the smallest prefix whose mass reaches top_p: a token stays if the mass before it is < top_p.
        keep_sorted = (cumulative - sorted_probs) < sampling.top_p
        threshold = jnp.min(jnp.where(keep_sorted, sorted_probs, jnp.inf), axis=-1, keepdims=True)
        probs = jnp.where(probs >= threshold, probs, 0.0)
        probs = probs / jnp.sum(probs, axis=-1, keepdims=True)
    return probs


def select(logits: Float[Array, "B V"], sampling: Sampling, key: jax.Array) -> Int[Array, " B"]:
    if sampling.greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    probs = target_probs(logits, sampling)
    return jax.random.categorical(key, jnp.log(probs), axis=-1).astype(jnp.int32)
