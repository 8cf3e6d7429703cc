"""`token_recycling`: candidates retrieved from an adjacency matrix of the target's own past top-k successors.

The tree is a BFS prefix of Token Recycling's 81-slot "2.2.2" template (budget 60 by default, 81 for the paper's
tree); after every verification each verified node's row becomes the target's top-k there. The matrix is the
method state, so it stays warm across prompts (hot start) unless the caller passes a fresh one.
"""

import dataclasses
import functools

from jspec.errors import UserError
from jspec.methods.base import Context, Method
from jspec.retrieval import adjacency
from jspec.retrieval.templates import TR_SIZE, Template, tr_prefix
from jspec.tree import from_static_parents


@functools.cache
def budget_template(budget: int) -> Template:
    if not 1 <= budget <= TR_SIZE:
        raise UserError(f"token_recycling budget must be in 1..{TR_SIZE}, got {budget}")
    return tr_prefix(budget)


@dataclasses.dataclass(frozen=True)
class TokenRecycling(Method):
    name: str = "token_recycling"
    vocab_size: int = 0  # set from the target by methods.build
    budget: int = 60
    k: int = 8

    def __post_init__(self):
        budget_template(self.budget)  # validates the budget early

    @property
    def tree_size(self) -> int:
        return self.budget

    @property
    def max_depth(self) -> int:
        return int(budget_template(self.budget).depths.max())

    def init_state(self, params, batch: int, max_cache_len: int) -> adjacency.Adjacency:
        if self.vocab_size < 1:
            raise UserError("token_recycling needs the target's vocabulary size")
        return adjacency.init(self.vocab_size, self.k)

    def propose(self, params, state: adjacency.Adjacency, ctx: Context):
        t = budget_template(self.budget)
        tokens = adjacency.retrieve(state, ctx.root, t.parents, t.ranks)
        return from_static_parents(tokens, t.parents), state

    def observe(self, params, state: adjacency.Adjacency, tree, logits, acceptance, features) -> adjacency.Adjacency:
        return adjacency.update(state, tree.tokens, tree.valid, logits)

    def save_state(self, state: adjacency.Adjacency, path: str) -> None:
        adjacency.save(state, path)

    def load_state(self, path: str) -> adjacency.Adjacency:
        return adjacency.load(path, vocab_size=self.vocab_size, k=self.k)
