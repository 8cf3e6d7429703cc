"""draft_model's adaptive chain (`min_confidence`): lossless, equal to the fixed chain when every draft is
confident, one draft per step when none is; its dynamic tree (`top_k`): lossless on a ragged batch; clear errors for
bad options. Tiny random target, float32."""

import pytest

from jspec.decode import generate
from jspec.errors import UserError
from jspec.methods import build, get_method
from jspec.spec_decode import speculative_generate
from test_dflash import KW, PROMPTS, tiny_target  # noqa: F401  (fixture)


def _run(target, **options):
    method, params = build("draft_model", target, drafter="truncate:3", gamma=4, **options)
    return speculative_generate(target.graphdef, target.params, PROMPTS, method=method, method_params=params, **KW)


@pytest.mark.parametrize("min_confidence", [0.3, 0.7])
def test_adaptive_chain_greedy_equals_vanilla_on_a_ragged_batch(tiny_target, min_confidence):
    res = _run(tiny_target, min_confidence=min_confidence)
    assert res.tokens == generate(tiny_target.graphdef, tiny_target.params, PROMPTS, **KW).tokens
    assert max(max(a[1:]) for a in res.accepted) > 1, "no draft accepted: the test would not exercise the chain"


def test_confident_drafts_keep_the_whole_chain_and_none_keeps_one(tiny_target):
    fixed = _run(tiny_target)
    every = _run(tiny_target, min_confidence=1e-30)  # every draft passes: the adaptive loop drafts all gamma
    assert every.tokens == fixed.tokens and every.accepted == fixed.accepted
    single = _run(tiny_target, min_confidence=1.0)  # no draft passes: one draft, then the bonus token
    assert single.tokens == fixed.tokens
    assert all(a <= 2 for acc in single.accepted for a in acc[1:])
    assert max(max(a[1:]) for a in fixed.accepted) > 2  # the fixed chain does accept more than one draft here


@pytest.mark.parametrize("top_k,budget,gamma", [(2, 8, 3), (3, 16, 4), (1, 3, 5)])
def test_tree_greedy_equals_vanilla_on_a_ragged_batch(tiny_target, top_k, budget, gamma):
    method, params = build("draft_model", tiny_target, drafter="truncate:3", gamma=gamma, top_k=top_k, budget=budget)
    assert method.tree_size == budget and method.max_depth == gamma
    res = speculative_generate(tiny_target.graphdef, tiny_target.params, PROMPTS, method=method,
                               method_params=params, **KW)
    assert res.tokens == generate(tiny_target.graphdef, tiny_target.params, PROMPTS, **KW).tokens
    assert max(max(a[1:]) for a in res.accepted) > 2, "no path past depth 1 accepted: the tree is not exercised"


@pytest.mark.parametrize("options,message", [({"gamma": 0}, "gamma must be >= 1"),
                                             ({"min_confidence": 1.5}, r"min confidence must be in \[0, 1\]"),
                                             ({"top_k": 2, "budget": 1}, "budget >= 2"),
                                             ({"top_k": -1}, "top_k >= 1"),
                                             ({"top_k": 2, "min_confidence": 0.5}, "applies to the chain")])
def test_bad_options(options, message):
    with pytest.raises(UserError, match=message):
        get_method("draft_model", **options)
