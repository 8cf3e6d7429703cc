"""T > 0: the distribution of the first generated tokens under every method equals the target's, exactly computed
on a tiny random model; a deliberately broken acceptance rule must fail the same test."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jspec.spec_decode as spec_decode
from jspec.config import ModelConfig
from jspec.methods import available, build, get_method
from jspec.models.cache import KVCache, causal_block_mask
from jspec.models.decoder import Decoder
from jspec.models.loading import LoadedModel
from jspec.sampling import Sampling, target_probs
from jspec.verify import accept

VOCAB = 8
PROMPT = [5, 5, 7, 7, 4, 5, 6, 6]  # chosen so that PLD candidates get accepted under this random model
SAMPLES = 4000
NEW = 3
SAMPLING = Sampling(temperature=1.0, top_p=0.95)
# Short PLD continuations so lookups hit on a short history; a 1-layer truncated copy as the draft model.
OPTIONS = {"pld": {"num_pred": 2, "max_ngram": 2}, "draft_model": {"drafter": "truncate:1", "gamma": 2}}


@pytest.fixture(scope="module")
def tiny():
    cfg = ModelConfig(family="llama", vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=8, rms_norm_eps=1e-6, max_position=256)
    graphdef, params = nnx.split(Decoder(cfg, dtype=jnp.float32, rngs=nnx.Rngs(3)))
    # Larger weights: peaked, history-dependent distributions (the default init is nearly uniform).
    params = jax.tree.map(lambda x: x * 12.0 if x.ndim == 2 else x, params)
    return cfg, graphdef, params


def exact_joint(cfg, graphdef, params) -> np.ndarray:
    """P(t1, t2, t3 | prompt) under SAMPLING, by enumerating all VOCAB^2 two-token continuations."""
    model = nnx.merge(graphdef, params)
    seqs = np.array([PROMPT + [a, b] for a in range(VOCAB) for b in range(VOCAB)])
    pos = jnp.broadcast_to(jnp.arange(seqs.shape[1]), seqs.shape)
    cache = KVCache.init(cfg, len(seqs), 32, jnp.float32)
    hidden, _, _ = model(jnp.asarray(seqs), pos, cache, causal_block_mask(jnp.zeros(len(seqs), int),
                                                                          jnp.ones(seqs.shape, bool)))
    probs = np.asarray(target_probs(model.logits(hidden), SAMPLING), np.float64)
    n = len(PROMPT)
    p1 = probs[0, n - 1]  # [V]
    p2 = probs[:, n].reshape(VOCAB, VOCAB, VOCAB)[:, 0]  # [t1, t2]
    p3 = probs[:, n + 1].reshape(VOCAB, VOCAB, VOCAB)  # [t1, t2, t3]
    return p1[:, None, None] * p2[:, :, None] * p3


def chi_square_pvalue(counts: np.ndarray, expected_p: np.ndarray) -> float:
    exp = expected_p.ravel() * counts.sum()
    obs = counts.ravel().astype(np.float64)
    big = exp >= 5  # pool the sparse cells into one bin
    exp_b = np.append(exp[big], exp[~big].sum())
    obs_b = np.append(obs[big], obs[~big].sum())
    keep = exp_b > 0
    stat = float(np.sum((obs_b[keep] - exp_b[keep]) ** 2 / exp_b[keep]))
    dof = int(keep.sum()) - 1
    return float(jax.scipy.special.gammaincc(dof / 2.0, stat / 2.0))


def make_method(name, cfg, graphdef, params, **domino_options):
    target = LoadedModel(name="tiny", cfg=cfg, graphdef=graphdef, params=params, tokenizer=None, dtype="float32",
                         chat=False)
    if name in ("eagle3", "eagle3_pruned", "graft"):  # a random drafter: arbitrary proposals, the output must not be
        from jspec.drafters.eagle3 import Eagle3Config, Eagle3Drafter

        taps = (0, 1, 1)  # the 2-layer target has no EAGLE-3 tap layers; any three layers exercise the plumbing
        dcfg = Eagle3Config(hidden_size=32, num_heads=4, num_kv_heads=2, head_dim=8, intermediate_size=64,
                            rms_norm_eps=1e-6, rope=cfg.rope, target_hidden_size=32, draft_vocab_size=VOCAB,
                            vocab_size=VOCAB, tap_layers=taps)
        d_graphdef, d_params = nnx.split(Eagle3Drafter(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(1)))
        # Thresholds that prune some rows at depth 0 or 1 and not others; graft retrieves into the freed slots.
        pruning = {"eagle3": {}, "eagle3_pruned": {"thresholds": (0.3, 0.2, 0.0)},
                   "graft": {"thresholds": (0.3, 0.2, 0.0), "vocab_size": VOCAB}}[name]
        method = get_method(name, drafter=d_graphdef, taps=taps, top_k=2, depth=2, budget=5, **pruning)
        return method, {"drafter": d_params, "embed": params["embed"][...]}
    if name in ("dflash", "domino", "graft_tail"):  # random block drafters; taps (0, 1) just exercise the plumbing
        from jspec.drafters.dflash import DFlashConfig, DFlashDrafter
        from jspec.drafters.domino import DominoConfig, DominoDrafter
        from jspec.methods import dflash_method

        dcfg = DFlashConfig(hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, head_dim=8, intermediate_size=64,
                            rms_norm_eps=1e-6, rope=cfg.rope, vocab_size=VOCAB, tap_layers=(0, 1), mask_token_id=7,
                            block_size=3, shift_label=name != "dflash")
        drafter = (DFlashDrafter(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(1)) if name == "dflash" else
                   DominoDrafter(DominoConfig(dcfg, gru_hidden=8, rank=8), dtype=jnp.float32, rngs=nnx.Rngs(1)))
        # Domino samples its drafts (its rule at T > 0), DFlash drafts greedily (its rule); graft_tail keeps part of
        # the sampled Domino block and retrieves a tree below it.
        options = {"threshold": 0.1, "tail": "tree", "budget": 5} if name == "graft_tail" else {}
        options = {"draft_temperature": 0.0 if name == "dflash" else 1.0, **options, **domino_options}
        return dflash_method(name, target, drafter, **options)
    return build(name, target, **OPTIONS.get(name, {}))


def sample_counts(graphdef, params, method, method_params=(), seed=0):
    res = spec_decode.speculative_generate(graphdef, params, [PROMPT] * SAMPLES, method=method, max_new_tokens=NEW,
                                           sampling=SAMPLING, seed=seed, max_cache_len=64,
                                           method_params=method_params)
    toks = np.array([t[:NEW] for t in res.tokens])
    counts = np.zeros((VOCAB,) * NEW, np.int64)
    np.add.at(counts, tuple(toks.T), 1)
    mat = sum(map(sum, res.accepted)) / sum(map(len, res.accepted))
    return counts, mat


@pytest.mark.parametrize("name", sorted(available()))
def test_first_tokens_follow_the_target_distribution(tiny, name):
    cfg, graphdef, params = tiny
    method, method_params = make_method(name, cfg, graphdef, params)
    counts, mat = sample_counts(graphdef, params, method, method_params)
    if name != "vanilla":
        assert mat > 1.03, f"{name} never got a candidate accepted: the test would not exercise it"
    assert chi_square_pvalue(counts, exact_joint(cfg, graphdef, params)) > 1e-3


def test_benched_domino_head_follows_the_target_distribution(tiny):
    """The bench's `domino_block_stop` at T > 0: greedy drafts among each row's candidates, through the GRU input
    table, the block kernel's path (the XLA loop off GPU) and the adaptive head stop."""
    cfg, graphdef, params = tiny
    method, method_params = make_method("domino", cfg, graphdef, params, draft_temperature=0.0, candidates=3,
                                        gru_table=True, head_kernel="block", head_stop=0.3)
    counts, mat = sample_counts(graphdef, params, method, method_params)
    assert mat > 1.02  # greedy drafts of a random drafter match the sampled target less often than sampled ones
    assert chi_square_pvalue(counts, exact_joint(cfg, graphdef, params)) > 1e-3


@pytest.mark.parametrize("options", [{"min_confidence": 0.5}, {"top_k": 2, "budget": 5}],
                         ids=["adaptive-chain", "tree"])
def test_draft_model_variants_follow_the_target_distribution(tiny, options):
    """draft_model with a confidence-adaptive chain (rows stop drafting at different points of the same step) and
    with a dynamic tree (several children per node, the deterministic-candidate rule over siblings)."""
    cfg, graphdef, params = tiny
    target = LoadedModel(name="tiny", cfg=cfg, graphdef=graphdef, params=params, tokenizer=None, dtype="float32",
                         chat=False)
    method, method_params = build("draft_model", target, drafter="truncate:1", gamma=3, **options)
    counts, mat = sample_counts(graphdef, params, method, method_params)
    assert mat > 1.03
    assert chi_square_pvalue(counts, exact_joint(cfg, graphdef, params)) > 1e-3


def _broken_rule(tree, logits, sampling, key, max_path):
    """A classic bug: accept a drafted child x with probability p(x), but on rejection sample the bonus from p
    itself instead of the residual (so drafted tokens are over-represented). Chains only."""
    probs = target_probs(logits, sampling)
    k_bonus, k_coin = jax.random.split(key)
    honest = jax.random.categorical(k_bonus, jnp.log(probs), axis=-1).astype(jnp.int32)
    parent = jnp.maximum(tree.parents, 0)
    p_child = jnp.take_along_axis(jnp.take_along_axis(probs, parent[:, :, None], axis=1),
                                  tree.tokens[:, :, None], axis=2)[..., 0]
    take = tree.valid & (jnp.arange(tree.size)[None, :] > 0) & (jax.random.uniform(k_coin, p_child.shape) < p_child)
    # With one child per node, "node i is accepted" is "its parent's choice is token i".
    choices = honest.at[jnp.arange(tree.tokens.shape[0])[:, None], parent].set(
        jnp.where(take, tree.tokens, jnp.take_along_axis(honest, parent, axis=1)))
    return accept(tree, choices, max_path)


def test_broken_rule_is_detected(tiny, monkeypatch):
    cfg, graphdef, params = tiny
    monkeypatch.setattr(spec_decode, "choose_and_accept", _broken_rule)
    jax.clear_caches()
    try:
        counts, mat = sample_counts(graphdef, params, get_method("pld", **OPTIONS["pld"]))
    finally:
        monkeypatch.undo()
        jax.clear_caches()
    assert mat > 1.03
    assert chi_square_pvalue(counts, exact_joint(cfg, graphdef, params)) < 1e-6
