"""What a decoding method supplies to the speculative loop: a static tree size, a proposal and an observation hook.

Methods are frozen (hashable) dataclasses: their fields are static configuration, compiled into the loop. Anything
that changes while decoding (adjacency matrix, drafter parameters and caches) is the method's `state` pytree, passed
in and out of the loop explicitly.
"""

import dataclasses
from typing import Any

import jax
from jaxtyping import Array, Float, Int

from jspec.tree import Tree


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Context:
    """What a proposal may look at: the root (last committed token, not yet in the cache) and the history."""

    root: Int[Array, " B"]
    history: Int[Array, "B H"]  # prompt + committed tokens + root; entries at >= history_len are stale
    history_len: Int[Array, " B"]
    lengths: Int[Array, " B"]  # committed tokens in the target cache (= history_len - 1)


@dataclasses.dataclass(frozen=True)
class Method:
    """Base: the root alone (plain autoregressive decoding through the speculative loop)."""

    name: str = "vanilla"

    @property
    def tree_size(self) -> int:
        return 1

    @property
    def max_depth(self) -> int:
        return 0

    def init_state(self, batch: int) -> Any:
        return ()

    def propose(self, state: Any, ctx: Context) -> tuple[Tree, Any]:
        from jspec.tree import chain

        return chain(ctx.root[:, None], (ctx.root >= 0)[:, None]), state

    def observe(self, state: Any, tree: Tree, logits: Float[Array, "B N V"]) -> Any:
        """Called after every verification with the target's logits at every tree node."""
        return state
