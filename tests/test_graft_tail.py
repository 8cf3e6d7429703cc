"""graft_tail: the block drafter's confident prefix + adjacency-matrix retrieval in the tail. The tree is built as
stated (kept drafts, then the retrieval template below the last kept one), greedy decoding equals vanilla on a tiny
target and on SmolLM2, a warm matrix lifts MAT above dflash's on repetitive text, and the state saves and loads."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from test_dflash import CFG, KW, PROMPTS, V, random_drafter, tiny_target  # noqa: F401 (tiny_target: a fixture)

from jspec.decode import generate
from jspec.drafters.dflash import DFlashConfig, DFlashDrafter
from jspec.drafters.domino import DominoConfig, DominoDrafter
from jspec.errors import UserError
from jspec.methods import build, dflash_method, get_method
from jspec.methods.base import Context
from jspec.methods.graft_tail import tail_template
from jspec.methods.token_recycling import TokenRecycling
from jspec.retrieval import adjacency
from jspec.spec_decode import speculative_generate


@pytest.fixture(scope="module")
def vanilla(tiny_target):
    m = tiny_target
    return generate(m.graphdef, m.params, PROMPTS, **KW).tokens


def drafter(kind: str, seed: int = 1, scale: float = 4.0):
    """A random drafter whose confidences spread over (0, 1) (the 0.02 init gives near-uniform drafts)."""
    graphdef, state = nnx.split(random_drafter(kind, seed))
    return nnx.merge(graphdef, jax.tree.map(lambda x: x * scale / 0.02 / np.sqrt(x.shape[-1]) if x.ndim == 2 else x,
                                            state))


@pytest.mark.parametrize("kind, options", [
    ("dflash", {}),
    ("dflash", {"threshold": 0.0, "budget": 9}),  # every draft kept, retrieval after the last one
    ("dflash", {"threshold": 1.0, "tail": "tree", "budget": 12}),  # retrieval alone, a tree
    ("domino", {"threshold": 0.05}),
    ("domino", {"threshold": 0.05, "tail": "tree", "budget": 10, "draft_temperature": 0.7}),
])
def test_greedy_equals_vanilla_with_a_hot_start(tiny_target, vanilla, kind, options):
    m = tiny_target
    method, params = dflash_method("graft_tail", m, drafter(kind), **options)
    assert method.head == (kind == "domino") and method.vocab_size == V
    first = speculative_generate(m.graphdef, m.params, PROMPTS, method=method, method_params=params, **KW)
    assert first.tokens == vanilla
    again = speculative_generate(m.graphdef, m.params, PROMPTS, method=method, method_params=params,
                                 method_state=first.method_state, **KW)  # warm matrix, fresh drafter state
    assert again.tokens == vanilla
    assert sum(map(sum, again.accepted)) == sum(map(len, vanilla))


def _proposal(method, params, state, prompt, features):
    """The tree proposed right after a prefill of `prompt` (root = its last token), and the draft block."""
    n = len(prompt) - 1
    state = method.prefill(params, state, jnp.asarray([prompt[:n]]), jnp.asarray([n]), jnp.asarray(prompt[n:]),
                           features)
    ctx = Context(root=jnp.asarray(prompt[n:]), history=jnp.zeros((1, 32), jnp.int32), history_len=jnp.asarray([n + 1]),
                  lengths=jnp.asarray([n]))
    tree, _ = jax.jit(method.propose)(params, state, ctx)
    drafts, rows, base, _ = jax.jit(method.draft_block)(params, state.draft, ctx)
    return tree, drafts, rows, base, ctx


@pytest.mark.parametrize("kind", ["dflash", "domino"])
def test_tree_keeps_the_confident_prefix_and_retrieves_the_tail(tiny_target, kind):
    rng = np.random.default_rng(0)
    table = jnp.asarray(rng.integers(0, V, (V, 8)), jnp.int32)  # a "warm" matrix: every row distinct successors
    prompt = rng.integers(0, 90, 7).tolist()
    features = jnp.asarray(rng.normal(size=(1, 6, CFG.feature_size)), jnp.float32)
    d = drafter(kind)
    chain_len = CFG.block_size  # root + the drafter's B - 1 drafts (a Domino drafter's last row is off by default)
    method, params = dflash_method("graft_tail", tiny_target, d, threshold=0.0)
    state = dataclasses.replace(method.init_state(params, 1, 32), adjacency=adjacency.Adjacency(table))
    _, drafts, rows, base, ctx = _proposal(method, params, state, prompt, features)
    cumulative = np.cumprod(np.asarray(method.confidence(params, rows, base, ctx.root, drafts))[0])
    middle = float(cumulative[1] + cumulative[2]) / 2  # keeps exactly two drafts
    cases = [(0.0, "chain", None, chain_len - 1), (middle, "chain", chain_len + 3, 2), (1.0, "tree", 12, 0),
             (middle, "tree", 12, 2)]
    for threshold, tail, budget, m in cases:
        method, params = dflash_method("graft_tail", tiny_target, d, threshold=threshold, tail=tail, budget=budget)
        tree, _, _, _, _ = _proposal(method, params, state, prompt, features)
        n = method.tree_size
        assert tree.size == n == (budget or chain_len) and bool(tree.valid.all())
        tokens, parents = np.asarray(tree.tokens[0]), np.asarray(tree.parents[0])
        # Slots 1..m: the drafts, a chain below the root.
        np.testing.assert_array_equal(tokens[1 : m + 1], np.asarray(drafts[0, :m]))
        np.testing.assert_array_equal(parents[: m + 1], np.arange(m + 1) - 1)
        # Slots m+1..: the retrieval template rooted at the last kept token, in the matrix's successors.
        last = prompt[-1] if m == 0 else int(drafts[0, m - 1])
        t = tail_template(tail, n)
        want = np.asarray(adjacency.retrieve(adjacency.Adjacency(table), jnp.asarray([last]), t.parents, t.ranks))
        np.testing.assert_array_equal(tokens[m + 1 :], want[0, 1 : n - m])
        np.testing.assert_array_equal(parents[m + 1 :], m + t.parents[1 : n - m])
        assert int(np.asarray(tree.depth).max()) <= method.max_depth


def test_warm_matrix_beats_dflash_on_repetitive_text(tiny_target):
    m = tiny_target
    prompt = [[11, 12, 13, 14, 15, 16] * 5]
    kw = dict(max_new_tokens=48, max_cache_len=128)
    want = generate(m.graphdef, m.params, prompt, **kw).tokens
    d = drafter("dflash", scale=1.0)
    dflash, d_params = dflash_method("dflash", m, d)
    base = speculative_generate(m.graphdef, m.params, prompt, method=dflash, method_params=d_params, **kw)
    tail, t_params = dflash_method("graft_tail", m, d)
    cold = speculative_generate(m.graphdef, m.params, prompt, method=tail, method_params=t_params, **kw)
    warm = speculative_generate(m.graphdef, m.params, prompt, method=tail, method_params=t_params,
                                method_state=cold.method_state, **kw)
    assert base.tokens == cold.tokens == warm.tokens == want

    def mat(res):
        return len(res.tokens[0]) / len(res.accepted[0])

    assert mat(warm) >= mat(cold) >= mat(base) and mat(warm) > 1.5 * mat(base), (mat(base), mat(cold), mat(warm))


def test_state_saves_loads_and_is_token_recycling_compatible(tiny_target, vanilla, tmp_path):
    m = tiny_target
    method, params = dflash_method("graft_tail", m, drafter("dflash"))
    res = speculative_generate(m.graphdef, m.params, PROMPTS, method=method, method_params=params, **KW)
    method.save_state(res.method_state, str(tmp_path / "adj.npz"))
    loaded = method.load_state(str(tmp_path / "adj.npz"))
    assert loaded.draft is None
    np.testing.assert_array_equal(loaded.adjacency.table, res.method_state.adjacency.table)
    again = speculative_generate(m.graphdef, m.params, PROMPTS, method=method, method_params=params,
                                 method_state=loaded, **KW)
    assert again.tokens == vanilla
    tr = TokenRecycling(vocab_size=V)
    np.testing.assert_array_equal(tr.load_state(str(tmp_path / "adj.npz")).table, res.method_state.adjacency.table)
    with pytest.raises(UserError, match="vocabulary of 96 tokens, but the model has 97"):
        dataclasses.replace(method, vocab_size=97).load_state(str(tmp_path / "adj.npz"))


@pytest.mark.parametrize("options, message", [
    ({"threshold": 1.5}, r"threshold must be in \[0, 1\]"),
    ({"tail": "forest"}, "tail must be one of chain, tree"),
    ({"budget": 1}, "budget must be >= 2"),
    ({"budget": 82, "tail": "tree"}, "<= 81 with the tree tail"),
    ({"k": 4, "tail": "tree"}, "k >= 8 successors"),
])
def test_bad_options(options, message):
    with pytest.raises(UserError, match=message):
        get_method("graft_tail", **options)


def test_build_needs_a_block_drafter(tiny_target):
    with pytest.raises(UserError, match="graft_tail needs a DFlash or Domino checkpoint"):
        build("graft_tail", tiny_target)


# ---- SmolLM2 -------------------------------------------------------------------------------------------------------

@pytest.mark.real_model
@pytest.mark.parametrize("kind", ["dflash", "domino"])
def test_smollm2_greedy_equals_vanilla(smollm2_vanilla, kind):
    """A random-init drafter: at the default threshold its drafts are dropped (the tail is pure retrieval), batch of 5
    with ragged prompts; at threshold 0 every draft is kept and retrieval follows the block, prompt by prompt with a
    hot start (over the first prompt and the repetitive one, which retrieval serves)."""
    m, ids, kw, vanilla = smollm2_vanilla
    dcfg = DFlashConfig.for_target(m.cfg, num_layers=1, shift_label=kind == "domino")
    module = (DFlashDrafter(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(0)) if kind == "dflash" else
              DominoDrafter(DominoConfig(dcfg, gru_hidden=64, rank=32), dtype=jnp.float32, rngs=nnx.Rngs(0)))
    method, params = dflash_method("graft_tail", m, module)
    assert speculative_generate(m.graphdef, m.params, ids, method=method, method_params=params, **kw).tokens == vanilla
    method, params = dflash_method("graft_tail", m, module, threshold=0.0, budget=24)
    state = None
    for i in (0, 2):
        res = speculative_generate(m.graphdef, m.params, [ids[i]], method=method, method_params=params,
                                   method_state=state, **kw)
        state = res.method_state
        assert res.tokens == [vanilla[i]]
