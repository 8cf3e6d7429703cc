"""Lossless tree verification: pick the accepted root-to-leaf path and the bonus token, then compact its K/V.

One rule serves greedy and sampled decoding. At every tree node the target chooses its next token `y` (argmax at
T = 0, a draw from the processed target distribution at T > 0), and a child is accepted iff its token equals the
parent's `y`. Along the accepted path each emitted token is therefore exactly the target's choice given its prefix,
and the bonus token is `y` at the last accepted node. For a candidate set that does not depend on the target's
coins this equals the residual rule of algorithms.md §7.2 (accept child x with probability p_res(x), zero it,
renormalise, try the next sibling, sample the bonus from the residual): both emit x with probability p(x).
Duplicate siblings are ignored after their first occurrence.
"""

import dataclasses

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from jspec.models.cache import KVCache
from jspec.sampling import Sampling, target_probs
from jspec.tree import Tree


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Acceptance:
    path: Int[Array, "B P"]  # tree slots of the accepted path, root first; entries past `path_len` repeat slot 0
    path_len: Int[Array, " B"]  # accepted nodes including the root (>= 1)
    bonus: Int[Array, " B"]  # the target's token after the last accepted node
    new_tokens: Int[Array, "B P"]  # accepted tree tokens (without the root) followed by the bonus; path_len valid


def target_choices(logits: Float[Array, "B N V"], sampling: Sampling, key: jax.Array) -> Int[Array, "B N"]:
    """The target's next token at every node: argmax, or an independent draw per node."""
    if sampling.greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return jax.random.categorical(key, jnp.log(target_probs(logits, sampling)), axis=-1).astype(jnp.int32)


def accept(tree: Tree, choices: Int[Array, "B N"], max_path: int) -> Acceptance:
    """Deepest node whose every ancestor edge matches the target's choices (ties: lowest slot)."""
    b, n = tree.tokens.shape
    parent = jnp.maximum(tree.parents, 0)
    slots = jnp.arange(n)
    first_of_siblings = ~jnp.any(
        (tree.parents[:, None, :] == tree.parents[:, :, None]) & (tree.tokens[:, None, :] == tree.tokens[:, :, None])
        & tree.valid[:, None, :] & (slots[None, None, :] < slots[None, :, None]), axis=-1)
    matches = jnp.take_along_axis(choices, parent, axis=1) == tree.tokens
    edge_ok = (slots[None, :] == 0) | (tree.valid & matches & first_of_siblings)
    accepted = tree.valid & ~jnp.any(tree.ancestors & ~edge_ok[:, None, :], axis=-1)
    score = jnp.where(accepted, tree.depth * n + (n - 1 - slots[None, :]), -1)
    best = jnp.argmax(score, axis=-1)
    on_path = jnp.take_along_axis(tree.ancestors, best[:, None, None], axis=1)[:, 0]  # [B, N]
    path_len = jnp.sum(on_path, axis=-1, dtype=jnp.int32)
    # Slot of the path node at each depth (nodes on one path have distinct depths).
    at_depth = on_path[:, None, :] & (tree.depth[:, None, :] == jnp.arange(max_path)[None, :, None])
    path = jnp.argmax(at_depth, axis=-1).astype(jnp.int32)
    bonus = jnp.take_along_axis(choices, best[:, None], axis=1)[:, 0]
    path_tokens = jnp.take_along_axis(tree.tokens, path, axis=1)
    # new_tokens[d] = token at depth d + 1 for d < path_len - 1, then the bonus at index path_len - 1.
    shifted = jnp.concatenate([path_tokens[:, 1:], jnp.zeros((b, 1), jnp.int32)], axis=1)
    new_tokens = jnp.where(jnp.arange(max_path)[None, :] == (path_len - 1)[:, None], bonus[:, None], shifted)
    return Acceptance(path=path, path_len=path_len, bonus=bonus, new_tokens=new_tokens)


def choose_and_accept(tree: Tree, logits: Float[Array, "B N V"], sampling: Sampling, key: jax.Array,
                      max_path: int) -> Acceptance:
    """The verification rule used by every method (see the module docstring)."""
    return accept(tree, target_choices(logits, sampling, key), max_path)


def commit_kv(cache: KVCache, acceptance: Acceptance, active: Bool[Array, " B"]) -> KVCache:
    """Moves the accepted path's K/V (written at `length + slot`) to contiguous slots `length + depth`."""
    b, p = acceptance.path.shape
    rows = jnp.arange(b)[:, None]
    src = cache.lengths[:, None] + acceptance.path
    keep = (jnp.arange(p)[None, :] < acceptance.path_len[:, None]) & active[:, None]
    slots = cache.k.shape[2]  # guard slots included: a dropped move must land past all of them
    dst = jnp.where(keep, cache.lengths[:, None] + jnp.arange(p)[None, :], slots)
    src = jnp.minimum(src, slots - 1)
    k = cache.k.at[:, rows, dst].set(cache.k[:, rows, src], mode="drop")
    v = cache.v.at[:, rows, dst].set(cache.v[:, rows, src], mode="drop")
    return dataclasses.replace(cache, k=k, v=v, lengths=cache.lengths + jnp.where(active, acceptance.path_len, 0))


def truncate_at_eos(new_tokens: Int[Array, "B P"], count: Int[Array, " B"], eos_mask_fn) -> tuple[
        Int[Array, " B"], Bool[Array, " B"]]:
    """(tokens to emit, hit EOS): emission stops right after the first EOS among the `count` new tokens."""
    p = new_tokens.shape[1]
    idx = jnp.arange(p)[None, :]
    is_eos = eos_mask_fn(new_tokens) & (idx < count[:, None])
    first = jnp.where(jnp.any(is_eos, axis=1), jnp.argmax(is_eos, axis=1) + 1, count)
    return first.astype(jnp.int32), jnp.any(is_eos, axis=1)
