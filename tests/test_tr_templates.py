"""Token Recycling trees: rank-path words of a template and the most-accepted subtree (bench/tr_node_stats.py)."""

import numpy as np
import pytest

from jspec.retrieval.templates import TR_SIZE, Template, best_subtree, tr_prefix, words


def as_paths(ws):
    return [tuple(int(c) for c in w) for w in ws]


def test_words_round_trip():
    full = tr_prefix(TR_SIZE)
    ws = words(full)
    assert ws[:4] == ["", "0", "1", "2"] and ws[-1] == "000100"
    again = Template.from_paths(as_paths(ws[1:]))
    assert np.array_equal(again.parents, full.parents) and np.array_equal(again.ranks, full.ranks)


def test_counts_in_bfs_order_choose_the_prefix():
    full = tr_prefix(TR_SIZE)
    chosen = best_subtree(full, np.arange(TR_SIZE)[::-1], 60)
    assert words(chosen) == words(tr_prefix(60))


def test_a_hot_deep_chain_beats_wide_nodes():
    full = tr_prefix(TR_SIZE)
    ws = words(full)
    counts = np.array([100 if set(w) <= {"0"} else 1 for w in ws])  # only the rank-0 chain is ever accepted
    # The whole chain, depth 6 included, then ties broken toward shallow nodes; listed in BFS order.
    assert words(best_subtree(full, counts, 10)) == ["", "0", "1", "2", "3", "00", "000", "0000", "00000", "000000"]
    # A child never enters before its parent, even with a higher count: the result is a valid BFS tree.
    counts = np.ones(TR_SIZE)
    counts[ws.index("000000")] = 1000
    chosen = words(best_subtree(full, counts, 4))
    assert "000000" not in chosen and chosen == ["", "0", "1", "2"]


def test_bad_sizes():
    full = tr_prefix(TR_SIZE)
    with pytest.raises(ValueError, match="1..81"):
        best_subtree(full, np.ones(TR_SIZE), 82)
    with pytest.raises(ValueError, match="needs 81 counts"):
        best_subtree(full, np.ones(60), 60)
