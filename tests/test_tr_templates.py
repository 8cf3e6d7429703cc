"""Token Recycling trees: rank-path words of a template, the most-accepted subtree (bench/tr_node_stats.py), tree
files, and token_recycling on a given tree (validated; greedy equals vanilla)."""

import dataclasses
import json
import pathlib
import types

import numpy as np
import pytest
from test_dflash import KW, PROMPTS, V, tiny_target  # noqa: F401 (tiny_target: a fixture)

from jspec.decode import generate
from jspec.errors import UserError
from jspec.methods.token_recycling import TokenRecycling
from jspec.retrieval.templates import (TR_SIZE, Template, best_subtree, read_tree, template, tr_deep, tr_prefix,
                                      words)
from jspec.spec_decode import speculative_generate


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


def test_read_tree(tmp_path):
    (tmp_path / "stats.json").write_text(json.dumps({"chosen": ["0", "1", "00"], "nodes": []}))
    (tmp_path / "words.txt").write_text("0 1\n00\n")
    assert read_tree(tmp_path / "stats.json") == read_tree(tmp_path / "words.txt") == ("0", "1", "00")
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(UserError, match="no \"chosen\" list"):
        read_tree(tmp_path / "other.json")
    (tmp_path / "empty.txt").write_text(" \n")
    with pytest.raises(UserError, match="empty"):
        read_tree(tmp_path / "empty.txt")


@pytest.mark.parametrize("tree, budget, message", [
    (("0", "9"), 3, "'9' is not a rank path"),
    (("0", "x1"), 3, "'x1' is not a rank path"),
    (("00", "0"), 3, "comes before its parent"),
    (("0", "0"), 3, "repeated"),
    (("0", "1"), 60, "3 slots with its root, but the budget is 60"),
])
def test_bad_custom_trees(tree, budget, message):
    with pytest.raises(UserError, match=message):
        TokenRecycling(vocab_size=V, budget=budget, tree=tree)


def test_custom_tree_is_lossless(tiny_target):
    """A deep chain plus a few siblings, decoded greedily, equals vanilla (twice: cold, then from the warm matrix)."""
    m = tiny_target
    vanilla = generate(m.graphdef, m.params, PROMPTS, **KW).tokens
    tree = ("0", "1", "00", "01", "000", "0000", "00000", "000000", "0000000")
    method = TokenRecycling(vocab_size=V, budget=len(tree) + 1, tree=tree)
    assert method.tree_size == 10 and method.max_depth == 7
    first = speculative_generate(m.graphdef, m.params, PROMPTS, method=method, **KW)
    again = speculative_generate(m.graphdef, m.params, PROMPTS, method=method, method_state=first.method_state, **KW)
    assert first.tokens == again.tokens == vanilla
    assert max(max(a) for a in again.accepted) > 1  # the warm matrix gets drafts accepted


@pytest.mark.parametrize("path", sorted(pathlib.Path(__file__).parents[1].glob("configs/trees/*.json")),
                         ids=lambda p: p.name)
def test_shipped_trees(path):
    """Each shipped tree is a valid token_recycling tree of the budget its name says, inside the base tree it was
    counted on (the 81-slot template unless the report names another), and is the subtree its own recorded
    acceptance counts choose."""
    tree = read_tree(path)
    report = json.loads(path.read_text())
    method = TokenRecycling(vocab_size=V, budget=len(tree) + 1, tree=tree)
    assert f"-{method.tree_size}-" in path.name
    base = template(report.get("template", "tr-2.2.2"))
    counts = {n["path"]: n["accepted"] for n in report["nodes"]}
    assert set(counts) == set(words(base))
    chosen = best_subtree(base, np.array([counts[w] for w in words(base)]), method.tree_size)
    assert tuple(words(chosen)[1:]) == tree


def test_deep_tree_extends_the_full_one():
    deep, full = tr_deep(), tr_prefix(TR_SIZE)
    assert deep.size == 109 and deep.depths.max() == 10 and "0" * 10 in words(deep)
    assert set(words(full)) < set(words(deep))
    assert np.all(np.diff(deep.depths) >= 0)  # BFS order, so retrieval gathers level by level


@pytest.mark.parametrize("deep", [False, True], ids=["tr-2.2.2", "tr-deep"])
def test_counted_nodes_follow_the_accepted_paths(tiny_target, deep):
    """Counts of the base tree: the root once per step, never more on a child than on its parent; the matrix comes
    back warm; the report's accepted lengths are ordered as the trees nest, and its tree file reads back."""
    from jspec.retrieval.tree_stats import count_accepted_nodes, tree_report

    model = dataclasses.replace(tiny_target, tokenizer=types.SimpleNamespace(eos_token_ids=()))  # no EOS: full runs
    base = tr_deep() if deep else None
    counts, steps, matrix = count_accepted_nodes(model, PROMPTS, max_new_tokens=40, base=base, progress=False)
    full = base or tr_prefix(TR_SIZE)
    assert len(counts) == full.size and counts[0] == steps > 0
    assert all(counts[i] <= counts[full.parents[i]] for i in range(1, full.size))
    assert counts[1:].sum() > 0  # the warm matrix gets drafts accepted
    assert matrix.table.shape == (V, 8) and (np.asarray(matrix.table) >= 0).any()
    report = tree_report(counts, steps, 60, base=base, model="tiny")
    assert report["base_size"] == full.size and len(report["nodes"]) == full.size
    assert report["mat_all"] >= report["mat_chosen"] >= report["mat_prefix"] and len(report["chosen"]) == 59
    assert set(report["chosen"]) <= set(words(full)[1:])
