"""Why a method's output differs from vanilla's: the target's top-2 logit gap where the two first diverge.

In bfloat16 a tree verification and a one-token decode round differently, so greedy outputs may part at a near-tie
(top-2 gap within bf16 rounding of zero). A divergence at a clear winner means a bug, not rounding.
"""

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from jspec.models.cache import KVCache, causal_block_mask
from jspec.models.loading import LoadedModel

SUSPECT_GAP = 0.25  # logits; bf16 keeps 8 significant bits, so |logit| ~ 20-30 rounds by about 0.1


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _last_logits(graphdef, params, tokens, length):
    """Logits after the first `length` tokens of a right-padded [1, T] row (T bucketed: few compilations)."""
    model = nnx.merge(graphdef, params)
    b, t = tokens.shape
    cache = KVCache.init(model.cfg, b, t, jax.tree.leaves(params)[0].dtype)
    positions = jnp.broadcast_to(jnp.arange(t), (b, t))
    hidden, _, _ = model(tokens, positions, cache, causal_block_mask(jnp.zeros((b,), jnp.int32), positions < length))
    return model.logits(hidden[0, length - 1])


def divergence_gap(model: LoadedModel, prompt: list[int], reference: list[int], other: list[int]) -> dict | None:
    """{"at": index, "gap": top-1 minus top-2 logit of the target on the reference prefix} or None if identical."""
    at = first_divergence(reference, other)
    if at is None or at >= min(len(reference), len(other)):
        return None if at is None else {"at": at, "gap": None}
    seq = prompt + reference[:at]
    width = -(-len(seq) // 128) * 128
    logits = _last_logits(model.graphdef, model.params, jnp.asarray([seq + [0] * (width - len(seq))]), len(seq))
    top2 = jax.lax.top_k(logits, 2)[0]
    return {"at": at, "gap": float(top2[0] - top2[1])}
