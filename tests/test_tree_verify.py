"""Tree construction, masks, acceptance, KV compaction and PLD lookup on hand-built cases."""

import jax.numpy as jnp
import numpy as np
import pytest

from jspec.models.cache import BlockMask, KVCache, causal_block_mask
from jspec.retrieval.pld import lookup
from jspec.tree import chain, from_parents, from_static_parents
from jspec.verify import accept, commit_kv, truncate_at_eos

#        0
#      /   \
#     1     2
#    / \     \
#   3   4     5
#   |
#   6
PARENTS = np.array([-1, 0, 0, 1, 1, 2, 3])
TOKENS = np.array([[10, 11, 12, 13, 14, 15, 16]])


def _tree(valid=None, tokens=TOKENS):
    valid = np.ones(tokens.shape, bool) if valid is None else valid
    return from_parents(jnp.asarray(tokens), jnp.asarray(PARENTS)[None], jnp.asarray(valid), max_depth=6)


def test_depth_and_ancestors():
    t = _tree()
    assert t.depth[0].tolist() == [0, 1, 1, 2, 2, 2, 3]
    anc = np.asarray(t.ancestors[0])
    assert np.flatnonzero(anc[6]).tolist() == [0, 1, 3, 6]
    assert np.flatnonzero(anc[5]).tolist() == [0, 2, 5]
    assert np.flatnonzero(anc[0]).tolist() == [0]


def test_invalid_node_invalidates_its_subtree():
    valid = np.ones((1, 7), bool)
    valid[0, 1] = False
    t = _tree(valid)
    assert t.valid[0].tolist() == [True, False, True, False, False, True, False]
    assert not np.asarray(t.ancestors[0, 3]).any()


def test_max_depth_cuts_long_chains():
    t = from_parents(jnp.asarray(TOKENS), jnp.asarray(PARENTS)[None], jnp.ones((1, 7), bool), max_depth=2)
    assert t.valid[0].tolist() == [True] * 6 + [False]


def test_static_template_matches_dynamic():
    a = from_static_parents(jnp.asarray(TOKENS), PARENTS)
    b = _tree()
    assert np.array_equal(a.ancestors, b.ancestors) and np.array_equal(a.depth, b.depth)
    with pytest.raises(ValueError):
        from_static_parents(jnp.asarray(TOKENS), np.array([-1, 2, 0, 1, 1, 2, 3]))


def test_block_mask_dense():
    t = _tree()
    dense = np.asarray(t.mask(jnp.array([3])).dense(12))[0]
    # node 6 (cache slot 3 + 6 = 9) sees the prefix slots 0..2 and its ancestors at slots 3, 4, 6, 9
    assert np.flatnonzero(dense[6]).tolist() == [0, 1, 2, 3, 4, 6, 9]
    assert np.flatnonzero(dense[2]).tolist() == [0, 1, 2, 3, 5]
    causal = np.asarray(causal_block_mask(jnp.array([0, 2]), jnp.array([[1, 1, 0], [1, 1, 1]], bool)).dense(6))
    assert np.flatnonzero(causal[0, 1]).tolist() == [0, 1] and not causal[0, 2].any()
    assert np.flatnonzero(causal[1, 2]).tolist() == [0, 1, 2, 3, 4]
    assert BlockMask(jnp.array([1]), jnp.eye(2, dtype=bool)[None]).write_slots(8).tolist() == [[1, 2]]


def test_accept_deepest_matching_path_and_bonus():
    t = _tree()
    # target choices per node: after root 11 (-> node 1), after node 1: 13 (-> node 3), after node 3: 16 (-> node 6)
    choices = jnp.array([[11, 13, 99, 16, 0, 0, 42]])
    acc = accept(t, choices, max_path=4)
    assert acc.path_len.tolist() == [4]
    assert acc.path[0].tolist() == [0, 1, 3, 6]
    assert acc.bonus.tolist() == [42]
    assert acc.new_tokens[0].tolist() == [11, 13, 16, 42]


def test_accept_stops_at_first_mismatch():
    choices = jnp.array([[12, 0, 77, 0, 0, 0, 0]])  # root -> node 2 (12); node 2 wants 77, its child has 15
    acc = accept(_tree(), choices, max_path=4)
    assert acc.path_len.tolist() == [2] and acc.path[0, :2].tolist() == [0, 2]
    assert acc.new_tokens[0, :2].tolist() == [12, 77]
    none = accept(_tree(), jnp.array([[5, 0, 0, 0, 0, 0, 0]]), max_path=4)
    assert none.path_len.tolist() == [1] and none.new_tokens[0, 0] == 5


def test_duplicate_siblings_first_wins():
    tokens = np.array([[10, 11, 11, 13, 14, 15, 16]])  # nodes 1 and 2 carry the same token
    choices = jnp.array([[11, 0, 15, 0, 0, 7, 0]])  # node 2's subtree would match deeper, but node 1 comes first
    acc = accept(_tree(tokens=tokens), choices, max_path=4)
    assert acc.path[0, : acc.path_len[0]].tolist() == [0, 1]


def test_commit_kv_moves_path_to_contiguous_slots():
    L, B, S = 2, 2, 16
    k = jnp.arange(L * B * S, dtype=jnp.float32).reshape(L, B, S, 1, 1)
    cache = KVCache(k=k, v=-k, lengths=jnp.array([3, 5]))
    t = from_parents(jnp.asarray(np.repeat(TOKENS, 2, 0)), jnp.asarray(np.repeat(PARENTS[None], 2, 0)),
                     jnp.ones((2, 7), bool), max_depth=6)
    acc = accept(t, jnp.array([[11, 13, 0, 16, 0, 0, 1], [12, 0, 15, 0, 0, 2, 0]]), max_path=4)
    new = commit_kv(cache, acc, jnp.array([True, True]))
    assert new.lengths.tolist() == [3 + 4, 5 + 3]
    got0 = np.asarray(new.k[0, 0, 3:7, 0, 0])
    assert got0.tolist() == [float(s) for s in (3 + 0, 3 + 1, 3 + 3, 3 + 6)]  # row 0: slots 0,1,3,6 of the tree
    got1 = np.asarray(new.v[1, 1, 5:8, 0, 0])
    assert got1.tolist() == [-(1 * B * S + 1 * S + s) for s in (5 + 0, 5 + 2, 5 + 5)]
    assert np.array_equal(new.k[:, :, :3], k[:, :, :3])  # prefix untouched
    frozen = commit_kv(cache, acc, jnp.array([False, True]))
    assert frozen.lengths.tolist() == [3, 8] and np.array_equal(frozen.k[:, 0], k[:, 0])


def test_truncate_at_eos():
    new = jnp.array([[5, 2, 7, 9], [5, 6, 7, 2], [2, 1, 1, 1]])
    emit, hit = truncate_at_eos(new, jnp.array([4, 3, 4]), lambda t: t == 2)
    assert emit.tolist() == [2, 3, 1] and hit.tolist() == [True, False, True]


def test_chain_tree():
    t = chain(jnp.array([[1, 2, 3, 4]]), jnp.array([[True, True, True, False]]))
    assert t.depth[0, :3].tolist() == [0, 1, 2] and t.valid[0].tolist() == [True, True, True, False]


def test_pld_lookup():
    #                   0  1  2  3  4  5  6  7  8  9 10 11
    hist = jnp.array([[7, 1, 2, 3, 4, 5, 6, 8, 1, 2, 3, 0]])
    cand, found = lookup(hist, jnp.array([11]), max_ngram=3, num_pred=3)  # suffix (1, 2, 3) matches at 1
    assert found.tolist() == [True] and cand[0].tolist() == [4, 5, 6]
    cand, found = lookup(hist, jnp.array([11]), max_ngram=3, num_pred=8)  # continuation would not fit
    assert found.tolist() == [False]
    hist2 = jnp.array([[3, 9, 4, 3, 9, 5, 3]])  # only the unigram 3 repeats; earliest match wins
    cand, found = lookup(hist2, jnp.array([7]), max_ngram=3, num_pred=2)
    assert found.tolist() == [True] and cand[0].tolist() == [9, 4]


def test_block_mask_window_for_level_by_level_drafting():
    # Window of 5 slots from start 4: slots 0-2 hold an earlier level; the 2 new tokens go to slots 3 and 4.
    block = np.zeros((1, 2, 5), bool)
    block[0, 0, [0, 3]] = True  # new token 0: child of slot 0
    block[0, 1, [1, 2, 4]] = True  # new token 1: child of slot 2, grandchild of slot 1
    mask = BlockMask(jnp.array([4]), jnp.asarray(block), offset=3)
    assert mask.valid.tolist() == [[True, True]] and not mask.is_square
    assert mask.write_slots(16).tolist() == [[7, 8]]
    dense = np.asarray(mask.dense(16))[0]
    assert np.flatnonzero(dense[0]).tolist() == [0, 1, 2, 3, 4, 7]
    assert np.flatnonzero(dense[1]).tolist() == [0, 1, 2, 3, 5, 6, 8]
