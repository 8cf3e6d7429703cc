"""Test cases and random draft trees for the tree-attention tests and benchmark."""

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Case:
    """One attention shape: T new tokens, query / kv heads, head dim, dtype and cache slots."""
    t: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str = "float32"
    cache_len: int = 256


def ancestor_mask(parents: np.ndarray) -> np.ndarray:
    """[T, T] bool: node i sees node j iff j is i or an ancestor of i (parents[i] < i, root's parent -1)."""
    t = len(parents)
    mask = np.eye(t, dtype=bool)
    for i, p in enumerate(parents):
        if p >= 0:
            mask[i] |= mask[p]
    return mask


def random_tree_masks(rng: np.random.Generator, batch: int, t: int, n_valid: list[int] | None = None) -> np.ndarray:
    """[B, T, T] ancestor masks of random trees; nodes from `n_valid[b]` on are padding (all-False rows/columns)."""
    masks = np.zeros((batch, t, t), bool)
    for b in range(batch):
        parents = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, t)])
        masks[b] = ancestor_mask(parents)
        n = t if n_valid is None else n_valid[b]
        masks[b, n:, :] = masks[b, :, n:] = False
    return masks
