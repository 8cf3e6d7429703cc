"""EAGLE-2 dynamic tree builder vs a plain-Python reference, driven by a Markov-table drafter."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jspec.config import ModelConfig
from jspec.drafters.dynamic_tree import build_dynamic_tree, window_size
from jspec.models.cache import BlockMask, KVCache, causal_block_mask
from jspec.models.decoder import Decoder

V = 30


def markov_step(carry, tokens, window_slots, block, offset, depth):
    """The drafter: log-probs of a token's children are its table row. Dead rows get NaN, as padding may."""
    table, calls = carry
    live = jnp.take_along_axis(block, window_slots[:, :, None], axis=2)[:, :, 0]
    logprobs = jnp.where(live[:, :, None], table[tokens], jnp.nan)
    return (table, calls + ((tokens, window_slots, block, offset, depth),)), logprobs


@functools.lru_cache(maxsize=None)
def jitted(top_k, depth, budget):
    def run(table, roots, token_ids):
        tree, info, (_, calls) = build_dynamic_tree(markov_step, (table, ()), roots, table[roots],
                                                    top_k=top_k, depth=depth, budget=budget, token_ids=token_ids)
        return tree, info, calls

    return jax.jit(run)


@dataclasses.dataclass
class Node:
    score: np.float32
    token: int
    depth: int
    key: tuple  # (depth, frontier position of the parent, child rank): the builder's storage order
    parent: "Node | None"

    def path(self):
        return (self.parent.path() if self.parent else []) + [self.token]


def reference(table, root, token_ids, top_k, depth, budget):
    """EAGLE-2 with loops and sorts; dead (-inf) candidates are dropped. Returns (slots, frontiers, best)."""

    def children(parent, row, d, pos):
        order = sorted(range(len(row)), key=lambda c: (-row[c], c))[:top_k]
        return [Node(np.float32((parent.score if parent else np.float32(0)) + row[c]), int(token_ids[c]), d,
                     (d, pos, r), parent) for r, c in enumerate(order) if row[c] > -np.inf]

    def ranked(nodes):
        return sorted(nodes, key=lambda n: (-n.score, n.key))

    level = children(None, table[root], 1, 0)
    stored, frontiers, best = list(level), [], [0.0, max(n.score for n in level)]
    for d in range(2, depth + 1):
        frontier = ranked(level)[:top_k]
        frontiers.append(frontier)
        level = [c for p, node in enumerate(frontier) for c in children(node, table[node.token], d, p)]
        stored += level
        best.append(max((n.score for n in level), default=-np.inf))
    slots = sorted(ranked(stored)[: budget - 1], key=lambda n: n.key)
    return slots, frontiers, best


def check(table, roots, token_ids, top_k, depth, budget):
    tree, info, calls = jitted(top_k, depth, budget)(jnp.asarray(table), jnp.asarray(roots), jnp.asarray(token_ids))
    tree, info, calls = jax.tree.map(np.asarray, (tree, info, calls))
    n = budget
    assert tree.tokens.shape == (2, n) and info.scores.shape == (2, n) and info.best_by_depth.shape == (2, depth + 1)
    assert len(calls) == depth - 1
    for b, root in enumerate(roots):
        slots, frontiers, best = reference(table, root, token_ids, top_k, depth, budget)
        m = 1 + len(slots)
        slot_of = {id(node): i + 1 for i, node in enumerate(slots)}
        assert tree.valid[b].tolist() == [True] * m + [False] * (n - m)
        assert tree.tokens[b, :m].tolist() == [root] + [s.token for s in slots]
        assert tree.parents[b, :m].tolist() == [-1] + [slot_of[id(s.parent)] if s.parent else 0 for s in slots]
        assert tree.depth[b, :m].tolist() == [0] + [s.depth for s in slots]
        np.testing.assert_array_equal(info.scores[b], [0.0] + [s.score for s in slots] + [-np.inf] * (n - m))
        np.testing.assert_array_equal(info.best_by_depth[b], np.float32(best))
        check_masks(calls, b, root, frontiers, top_k, depth)
    check_invariants(tree, info, depth)


def check_masks(calls, b, root, frontiers, top_k, depth):
    """Level l's block rows see exactly the window slots holding the node's root path."""
    fed = {0: root}
    for level, ((tokens, window_slots, block, offset, d), frontier) in enumerate(zip(calls, frontiers), 1):
        assert d == level and offset == 1 + (level - 1) * top_k
        assert block.shape[1:] == (top_k, window_size(top_k, depth))
        assert window_slots[b].tolist() == list(range(offset, offset + top_k))
        fed.update({offset + i: int(t) for i, t in enumerate(tokens[b])})
        for i in range(top_k):
            seen = np.flatnonzero(block[b, i])
            if i < len(frontier):
                assert [fed[s] for s in seen] == [root] + frontier[i].path() and seen[-1] == offset + i
                parent = frontier[i].parent
                assert seen[-2] == (0 if parent is None else offset - top_k + frontiers[level - 2].index(parent))
            else:
                assert len(seen) == 0


def check_invariants(tree, info, max_depth):
    for b in range(tree.tokens.shape[0]):
        valid, parents = tree.valid[b], tree.parents[b]
        assert valid[0] and parents[0] == -1 and tree.depth[b, 0] == 0
        for i in np.flatnonzero(valid)[1:]:
            p = parents[i]
            assert 0 <= p < i and valid[p]
            assert tree.depth[b, i] == tree.depth[b, p] + 1 <= max_depth
            assert info.scores[b, i] <= info.scores[b, p]
            expected = tree.ancestors[b, p].copy()
            expected[i] = True
            np.testing.assert_array_equal(tree.ancestors[b, i], expected)
        assert not tree.ancestors[b, ~valid].any()


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return (x - np.log(np.exp(x).sum(axis=-1, keepdims=True))).astype(np.float32)


@pytest.mark.parametrize("top_k", [2, 4])
@pytest.mark.parametrize("depth", [3, 5])
@pytest.mark.parametrize("budget", [8, 16, 60])
def test_matches_reference(top_k, depth, budget):
    for seed in range(3):
        rng = np.random.default_rng(seed)
        table = log_softmax(rng.normal(size=(V, V)) * 2)
        check(table, rng.choice(V, 2, replace=False), np.arange(V), top_k, depth, budget)


@pytest.mark.parametrize("kind", ["ties", "dead", "token_ids"])
def test_degenerate_drafters(kind):
    """Exact score ties (parent/child equal too), rows with fewer than top_k live children, a reduced draft vocab."""
    rng = np.random.default_rng(7)
    vocab, token_ids = V, np.arange(V)
    if kind == "ties":
        table = -rng.integers(0, 3, size=(V, V)).astype(np.float32)
    elif kind == "dead":
        table = np.full((V, V), -np.inf, np.float32)
        for row in table:
            row[rng.choice(V, 3, replace=False)] = log_softmax(rng.normal(size=3))
    else:  # log-prob column c is token token_ids[c] of a larger vocabulary
        vocab = 50
        token_ids = rng.choice(vocab, V, replace=False)
        table = log_softmax(rng.normal(size=(vocab, V)) * 2)
    for budget in (16, 60):
        check(table, rng.choice(token_ids, 2, replace=False), token_ids, 4, 5, budget)


def test_jit_compiles_once():
    traces = []

    def step(carry, *args):
        traces.append(args[-1])
        return markov_step(carry, *args)

    @jax.jit
    def run(table, roots):
        return build_dynamic_tree(step, (table, ()), roots, table[roots], top_k=3, depth=4, budget=20)[0]

    outs = []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        outs.append(run(jnp.asarray(log_softmax(rng.normal(size=(V, V)))), jnp.asarray(rng.choice(V, 2))))
    assert traces == [1, 2, 3]
    assert not np.array_equal(outs[0].tokens, outs[1].tokens)


def test_single_level_and_root_only():
    rng = np.random.default_rng(3)
    table = log_softmax(rng.normal(size=(V, V)))
    roots = np.array([4, 9])
    tree, info, _ = build_dynamic_tree(markov_step, (jnp.asarray(table), ()), jnp.asarray(roots),
                                       jnp.asarray(table[roots]), top_k=3, depth=1, budget=3)
    assert np.asarray(tree.depth).tolist() == [[0, 1, 1]] * 2
    assert np.asarray(tree.tokens[:, 1:]).tolist() == np.argsort(-table[roots], axis=1)[:, :2].tolist()
    np.testing.assert_array_equal(info.best_by_depth, np.stack([np.zeros(2), table[roots].max(1)], 1))
    tree, _, _ = build_dynamic_tree(markov_step, (jnp.asarray(table), ()), jnp.asarray(roots),
                                    jnp.asarray(table[roots]), top_k=3, depth=2, budget=1)
    assert np.asarray(tree.valid).tolist() == [[True]] * 2 and np.asarray(tree.tokens).tolist() == [[4], [9]]


def test_window_convention_with_a_decoder_drafter():
    """A real decoder fed level by level through BlockMask(root slot, block, offset) gives every frontier node the
    log-probs of a plain causal forward over prompt + its root path."""
    cfg = ModelConfig(family="llama", vocab_size=V, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                      num_kv_heads=2, head_dim=8, max_position=64)
    model = Decoder(cfg, dtype=jnp.float32, rngs=nnx.Rngs(1))
    top_k, depth = 2, 3
    prompts = np.array([[3, 7, 1, 9, 4, 0, 0], [5, 2, 8, 8, 6, 1, 2]])
    lens = jnp.array([5, 7])

    def last_logprobs(tokens, length):
        pos = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        cache = KVCache.init(cfg, tokens.shape[0], 24, jnp.float32)
        hidden, cache, _ = model(tokens, pos, cache, causal_block_mask(jnp.zeros_like(length), pos < length[:, None]))
        last = jnp.take_along_axis(hidden, (length - 1)[:, None, None], axis=1)[:, 0]
        return jax.nn.log_softmax(model.logits(last)), cache

    first, cache = last_logprobs(jnp.asarray(prompts), lens)
    root_slot = lens - 1

    def step(carry, tokens, window_slots, block, offset, level):
        cache, calls = carry
        hidden, cache, _ = model(tokens, root_slot[:, None] + level, cache, BlockMask(root_slot, block, offset))
        logprobs = jax.nn.log_softmax(model.logits(hidden))
        return (cache, calls + ((tokens, block, logprobs),)), logprobs

    roots = jnp.asarray(prompts[[0, 1], [4, 6]])
    build = jax.jit(lambda c, f: build_dynamic_tree(step, (c, ()), roots, f, top_k=top_k, depth=depth, budget=8))
    _, _, (_, calls) = build(cache, first)
    seqs, got = [], []
    for b in range(2):
        fed = {}
        for level, (tokens, block, logprobs) in enumerate(calls):
            fed.update({1 + level * top_k + i: int(t) for i, t in enumerate(tokens[b])})
            for i in range(top_k):
                seqs.append(list(prompts[b, : lens[b]]) + [fed[s] for s in np.flatnonzero(block[b, i])[1:]])
                got.append(logprobs[b, i])
    width = max(map(len, seqs))
    expected, _ = last_logprobs(jnp.asarray([q + [0] * (width - len(q)) for q in seqs]),
                                jnp.asarray([len(q) for q in seqs]))
    np.testing.assert_allclose(np.stack(got), expected, atol=1e-5)
