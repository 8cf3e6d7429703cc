"""What a decoding method supplies to the speculative loop: a static tree size, a proposal and an observation hook.

Methods are frozen (hashable) dataclasses: their fields are static configuration, compiled into the loop. Weights a
method needs (a drafter's parameters) are its `params` pytree, passed to every hook but never donated; anything that
changes while decoding (adjacency matrix, drafter KV cache) is its `state` pytree, passed in and out of the loop.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from jspec.errors import UserError
from jspec.tree import Tree, chain


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

    @property
    def target_taps(self) -> tuple[int, ...]:
        """Target decoder layers whose outputs the method needs (EAGLE-3 features); () for none."""
        return ()

    def init_state(self, params: Any, batch: int, max_cache_len: int) -> Any:
        return ()

    def resume_state(self, params: Any, state: Any, batch: int, max_cache_len: int) -> Any:
        """Fits a state handed back by an earlier call (or `load_state`) to this call's batch and cache: what
        persists across prompts (an adjacency matrix) stays, per-sequence parts may be rebuilt. Default: as is."""
        return state

    def prefill(self, params: Any, state: Any, tokens: Int[Array, "B T"], prompt_lens: Int[Array, " B"],
                first_token: Int[Array, " B"], features: Float[Array, "B T F"] | None) -> Any:
        """Called once after the target's prefill: right-padded prompts, the first generated token and the
        concatenated `target_taps` outputs at every prompt position (None without taps)."""
        return state

    def propose(self, params: Any, state: Any, ctx: Context) -> tuple[Tree, Any]:
        return chain(ctx.root[:, None], jnp.ones((ctx.root.shape[0], 1), bool)), state

    def observe(self, params: Any, state: Any, tree: Tree, logits: Float[Array, "B N V"], acceptance: Any,
                features: Float[Array, "B N F"] | None) -> Any:
        """Called after every verification with the target's logits (and `target_taps` outputs) at every tree node
        and the accepted path (`jspec.verify.Acceptance`)."""
        return state

    def save_state(self, state: Any, path: str) -> None:
        """Persists what the method learned while decoding (e.g. a warmed-up adjacency matrix)."""
        raise UserError(f"method {self.name!r} keeps no state to save")

    def load_state(self, path: str) -> Any:
        raise UserError(f"method {self.name!r} keeps no state to load")
