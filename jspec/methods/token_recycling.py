"""`token_recycling`: candidates retrieved from an adjacency matrix of the target's own past top-k successors.

The tree is a BFS prefix of Token Recycling's 81-slot "2.2.2" template (budget 60 by default, 81 for the paper's
tree), or a given tree of rank paths (`tree`, e.g. the most-accepted subtree that `jspec calibrate --tree-out`
measures, jspec.retrieval.tree_stats); after every verification each verified node's row becomes the target's top-k
there. The matrix is the method state, so it stays warm across prompts (hot start) unless the caller passes a fresh
one.
"""

import dataclasses
import functools

from jspec.errors import UserError
from jspec.methods.base import Context, Method
from jspec.retrieval import adjacency
from jspec.retrieval.templates import K, TR_SIZE, Template, tr_prefix
from jspec.tree import from_static_parents


@functools.cache
def budget_template(budget: int, tree: tuple[str, ...] = ()) -> Template:
    """The BFS prefix of the 2.2.2 tree with `budget` slots, or the tree of the rank paths `tree` (root excluded;
    parents first), which must then have `budget` slots with its root."""
    if not tree:
        if not 1 <= budget <= TR_SIZE:
            raise UserError(f"token_recycling budget must be in 1..{TR_SIZE}, got {budget}")
        return tr_prefix(budget)
    bad = [w for w in tree if not (w.isdigit() and all(int(c) < K for c in w))]
    if bad:
        raise UserError(f"token_recycling tree: {bad[0]!r} is not a rank path (digits 0..{K - 1}, e.g. \"010\")")
    try:
        template = Template.from_paths([tuple(int(c) for c in w) for w in tree])
    except ValueError as e:
        raise UserError(f"token_recycling tree: {e}") from None
    if template.size != budget:
        raise UserError(f"token_recycling tree has {template.size} slots with its root, but the budget is {budget}")
    return template


@dataclasses.dataclass(frozen=True)
class TokenRecycling(Method):
    name: str = "token_recycling"
    vocab_size: int = 0  # set from the target by methods.build
    budget: int = 60
    k: int = 8
    tree: tuple[str, ...] = ()  # rank paths of a custom tree (len = budget - 1); empty: the 2.2.2 prefix

    def __post_init__(self):
        budget_template(self.budget, self.tree)  # validates the budget and tree early

    @property
    def tree_size(self) -> int:
        return self.budget

    @property
    def max_depth(self) -> int:
        return int(budget_template(self.budget, self.tree).depths.max())

    def init_state(self, params, batch: int, max_cache_len: int) -> adjacency.Adjacency:
        if self.vocab_size < 1:
            raise UserError("token_recycling needs the target's vocabulary size")
        return adjacency.init(self.vocab_size, self.k)

    def propose(self, params, state: adjacency.Adjacency, ctx: Context):
        t = budget_template(self.budget, self.tree)
        tokens = adjacency.retrieve(state, ctx.root, t.parents, t.ranks)
        return from_static_parents(tokens, t.parents), state

    def observe(self, params, state: adjacency.Adjacency, tree, logits, acceptance, features) -> adjacency.Adjacency:
        return adjacency.update(state, tree.tokens, tree.valid, logits)

    def save_state(self, state: adjacency.Adjacency, path: str) -> None:
        adjacency.save(state, path)

    def load_state(self, path: str) -> adjacency.Adjacency:
        return adjacency.load(path, vocab_size=self.vocab_size, k=self.k)
