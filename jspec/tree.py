"""The static-shape verification tree: `budget` slots per batch row, slot 0 the root (last committed token).

Slots are in topological order (a parent's slot is below its children's), so one forward over the slots with the
ancestor mask verifies every root-to-leaf path at once. Shapes depend only on the budget, never on data.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int

from jspec.models.cache import BlockMask


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Tree:
    tokens: Int[Array, "B N"]
    parents: Int[Array, "B N"]  # parent slot; -1 for the root and for invalid slots
    depth: Int[Array, "B N"]  # root 0
    valid: Bool[Array, "B N"]
    ancestors: Bool[Array, "B N N"]  # [b, i, j]: slot j is slot i or one of its ancestors (valid slots only)

    @property
    def size(self) -> int:
        return self.tokens.shape[1]

    def positions(self, lengths: Int[Array, " B"]) -> Int[Array, "B N"]:
        """Absolute positions: the root sits at the row's committed length."""
        return lengths[:, None] + self.depth

    def mask(self, lengths: Int[Array, " B"]) -> BlockMask:
        """Tree slot j is written at cache slot `lengths + j`; each node sees the prefix and its ancestors."""
        return BlockMask(start=lengths, block=self.ancestors)


def from_parents(tokens: Int[Array, "B N"], parents: Int[Array, "B N"], valid: Bool[Array, "B N"],
                 max_depth: int) -> Tree:
    """Builds depth and ancestor mask by walking `max_depth` parent links (static loop, vectorised over slots).

    Requires `parents[:, 0] == -1` and `parents[:, i] < i`. A slot is valid only if its whole ancestor chain is valid
    and within `max_depth` of the root.
    """
    b, n = tokens.shape
    slots = jnp.arange(n)
    valid = valid & ((parents < slots) | (slots == 0))
    parents = jnp.where(valid & (slots > 0), parents, -1)
    ancestors = jnp.broadcast_to(jnp.eye(n, dtype=bool), (b, n, n)) & valid[:, :, None]
    chain_ok = valid
    current = parents
    for _ in range(max_depth):
        has = current >= 0
        safe = jnp.maximum(current, 0)
        chain_ok = chain_ok & jnp.where(has, jnp.take_along_axis(valid, safe, axis=1), True)
        ancestors = ancestors | (jax.nn.one_hot(safe, n, dtype=bool) & has[:, :, None])
        current = jnp.where(has, jnp.take_along_axis(parents, safe, axis=1), -1)
    valid = chain_ok & (current < 0)  # a chain longer than max_depth is cut
    ancestors = ancestors & valid[:, :, None]
    depth = jnp.sum(ancestors, axis=-1, dtype=jnp.int32) - 1
    return Tree(tokens=jnp.where(valid, tokens, 0), parents=jnp.where(valid, parents, -1), depth=depth,
                valid=valid, ancestors=ancestors)


def from_static_parents(tokens: Int[Array, "B N"], parents: np.ndarray, valid: Bool[Array, "B N"] | None = None
                        ) -> Tree:
    """A tree whose shape is a compile-time template (Token Recycling, chains)."""
    parents = np.asarray(parents)
    b, n = tokens.shape
    depth = _static_depth(parents)
    valid = jnp.ones((b, n), bool) if valid is None else valid
    return from_parents(tokens, jnp.broadcast_to(jnp.asarray(parents, jnp.int32), (b, n)), valid,
                        max_depth=int(depth.max()))


def chain(tokens: Int[Array, "B N"], valid: Bool[Array, "B N"]) -> Tree:
    """Root followed by a single path (PLD, draft-model chains, DFlash blocks)."""
    return from_static_parents(tokens, np.arange(tokens.shape[1]) - 1, valid)


def _static_depth(parents: np.ndarray) -> np.ndarray:
    if parents[0] != -1 or np.any(parents[1:] >= np.arange(1, len(parents))) or np.any(parents[1:] < 0):
        raise ValueError("template parents must have the root at slot 0 and each parent before its child")
    depth = np.zeros(len(parents), np.int32)
    for i in range(1, len(parents)):
        depth[i] = depth[parents[i]] + 1
    return depth
