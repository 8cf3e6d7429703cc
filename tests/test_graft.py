"""Graft and eagle3_pruned: stage budgets and templates, pruning checkpoints in the dynamic tree (with the drafting
compute really skipped), the trie-union merge, calibration, state files; on the real SmolLM2-135M with a random
EAGLE-3 drafter: greedy tokens equal vanilla's in every stage, and the graft tree contains the pruned tree."""

import dataclasses
import functools
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jspec.spec_decode as spec_decode
from jspec.config import ModelConfig
from jspec.decode import generate, pad_prompts
from jspec.drafters.dynamic_tree import build_dynamic_tree
from jspec.drafters.eagle3 import Eagle3Config, Eagle3Drafter
from jspec.errors import UserError
from jspec.methods import eagle3_method, get_method
from jspec.methods.base import Context
from jspec.methods.graft import calibrate, fit_thresholds, graft_retrieved
from jspec.models.decoder import Decoder
from jspec.models.loading import LoadedModel, load_model
from jspec.retrieval import adjacency
from jspec.retrieval.templates import graft_stages, graft_templates
from jspec.sampling import Sampling
from jspec.tree import from_parents

V = 30
FORCE = {0: (1.0, 0.0, 0.0), 1: (0.0, 1.0, 0.0), 2: (0.0, 0.0, 1.0), 3: (0.0, 0.0, 0.0)}  # stage -> thresholds


def log_softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    return (x - np.log(np.exp(x).sum(axis=-1, keepdims=True))).astype(np.float32)


def slot_paths(tree, b: int) -> dict[int, tuple[int, ...]]:
    """Token path root → node of every valid slot of row b."""
    tokens, parents, valid = (np.asarray(x)[b] for x in (tree.tokens, tree.parents, tree.valid))
    out = {}
    for i in np.flatnonzero(valid):
        out[int(i)] = (out[parents[i]] if i else ()) + (int(tokens[i]),)
    return out


def paths(tree, b: int) -> set[tuple[int, ...]]:
    return set(slot_paths(tree, b).values())


def assert_single_valued(tree):
    for b in range(tree.tokens.shape[0]):
        valid = np.asarray(tree.valid[b])
        kids = list(zip(np.asarray(tree.parents[b])[valid], np.asarray(tree.tokens[b])[valid]))
        assert len(kids) == len(set(kids)), "duplicate sibling tokens"


# --- stages and templates -------------------------------------------------------------------------------------------

def test_stage_budgets_and_templates():
    s = graft_stages(60)
    assert s.checkpoints == (0, 1, 5) and s.draft == (8, 24, 40, 59) and s.retrieve == (52, 36, 20, 1)
    for budget in range(1, 61):
        s = graft_stages(budget)
        assert all(d + r == budget for d, r in zip(s.draft, s.retrieve))
        assert list(s.draft) == sorted(s.draft) and s.retrieve[-1] == 1 and min(s.draft) >= 0
    assert graft_stages(30).retrieve == (26, 18, 10, 1) and graft_stages(1).draft == (0, 0, 0, 0)
    for bad in (0, 61, 81):
        with pytest.raises(UserError, match="graft budget must be in 1..60"):
            graft_stages(bad)
    with pytest.raises(UserError, match="budget"):
        get_method("graft", budget=61)
    with pytest.raises(UserError, match="fixed-split"):
        get_method("graft", fixed_split=60)
    with pytest.raises(UserError, match="thresholds"):
        get_method("eagle3_pruned", thresholds=(0.1, 0.2))

    t = graft_templates()
    assert t.pool.size == 52 and t.pool.widths[0] == 8 and t.pool.depths.max() == 8
    assert np.all(t.parents[1:] < np.arange(1, t.pool.size)) and t.order[0] == 0  # every prefix is a tree
    # The priority order lists the pool's paths; its prefixes of 20 and 36 are the smaller stages' templates.
    by_pool = {}
    for i in range(1, t.pool.size):
        by_pool[i] = by_pool.get(t.pool.parents[i], ()) + (int(t.pool.ranks[i]),)
    prio = [()] + [by_pool[i] for i in t.order[1:]]
    assert all(prio[t.parents[i]] == prio[i][:-1] and t.depths[i] == len(prio[i]) for i in range(1, len(prio)))
    for size, depth in ((20, 8), (36, 8)):
        assert max(map(len, prio[:size])) == depth  # the rank-0 chain stays deepest in every stage
    assert sorted(prio[1:5]) == [(0,), (1,), (2,), (3,)]
    # Asymmetric: rank-0 successors own the largest subtrees.
    sub = [sum(p[:1] == (r,) for p in prio) for r in range(8)]
    assert sub == sorted(sub, reverse=True) and sub[0] > 2 * sub[1]


# --- pruning checkpoints in the dynamic tree ------------------------------------------------------------------------

CHECKPOINTS, KEEP, TOP_K, DEPTH, BUDGET = (0, 1, 5), (2, 8, 25, 39), 3, 7, 40


def counting_step(calls):
    def step(table, tokens, window_slots, block, offset, depth):
        jax.debug.callback(lambda: calls.append(depth))  # runs only when the forward really runs
        live = jnp.take_along_axis(block, window_slots[:, :, None], axis=2)[:, :, 0]
        return table, jnp.where(live[:, :, None], table[tokens], jnp.nan)

    return step


@functools.cache
def pruned_builder(depth, pruned: bool):
    calls = []
    opts = dict(checkpoints=CHECKPOINTS, keep=KEEP) if pruned else {}

    @jax.jit
    def run(table, roots, thresholds):
        return build_dynamic_tree(counting_step(calls), table, roots, table[roots], top_k=TOP_K, depth=depth,
                                  budget=BUDGET, **opts, **({"thresholds": thresholds} if pruned else {}))[:2]

    return run, calls


def top_paths(table, root, level, k):
    """The top-k nodes by (score, storage order) of the dense tree cut at `level`: what a pruned row keeps."""
    run, _ = pruned_builder(level, False)
    tree, info = run(table, jnp.asarray([root]), None)
    scores, by_slot = np.asarray(info.scores[0]), slot_paths(tree, 0)
    slots = sorted(list(by_slot)[1:], key=lambda s: (-scores[s], s))[:k]
    return {by_slot[s] for s in [0] + slots}


@pytest.mark.parametrize("stages,forwards", [((0, 0), 0), ((1, 1), 1), ((2, 2), 5), ((3, 3), 6), ((0, 3), 6),
                                             ((1, 2), 5)])
def test_checkpoints_prune_rows_and_skip_the_drafting(stages, forwards):
    table = jnp.asarray(log_softmax(np.random.default_rng(0).normal(size=(V, V)) * 2))
    roots = [4, 17]
    run, calls = pruned_builder(DEPTH, True)
    calls.clear()
    tree, info = run(table, jnp.asarray(roots), jnp.asarray([FORCE[s] for s in stages]))
    jax.effects_barrier()
    assert len(calls) == forwards  # drafter forwards actually executed
    assert np.asarray(info.stage).tolist() == list(stages)
    for b, (root, stage) in enumerate(zip(roots, stages)):
        level = CHECKPOINTS[stage] + 1 if stage < 3 else DEPTH
        assert paths(tree, b) == top_paths(table, root, level, KEEP[stage])
        assert int(np.asarray(tree.valid[b]).sum()) == 1 + KEEP[stage]


def test_confidence_thresholds_decide_per_row():
    """c_0 = the drafter's top-1 probability for the root's children: a threshold between two rows' splits them."""
    table = log_softmax(np.random.default_rng(1).normal(size=(V, V)) * 2)
    roots = np.array([3, 8])
    c0 = np.exp(table[roots].max(axis=1))
    tau = float(c0.mean())
    run, _ = pruned_builder(DEPTH, True)
    _, info = run(jnp.asarray(table), jnp.asarray(roots), jnp.asarray([tau, 0.0, 0.0]))
    np.testing.assert_allclose(np.exp(info.best_by_depth[:, 1]), c0, rtol=1e-6)
    assert np.asarray(info.stage).tolist() == [0 if c < tau else 3 for c in c0] and c0.min() < tau < c0.max()


# --- merge ----------------------------------------------------------------------------------------------------------

def test_merge_handcrafted():
    n = 10
    # Draft: root 100 -> 5 -> 7 and root -> 6; three draft nodes kept.
    draft = from_parents(jnp.asarray([[100, 5, 6, 7] + [0] * 6]), jnp.asarray([[-1, 0, 0, 1] + [-1] * 6]),
                         jnp.asarray([[True] * 4 + [False] * 6]), max_depth=8)
    # Template (priority order): "0"=5 (the draft node), "1"=9, "2"=9 (a duplicate sibling, as in a cold row),
    # "00"=7 (the draft node under 5), "01"=8, "10"=3, "20"=3 (under the merged duplicate), "000"=4.
    parents = np.array([-1, 0, 0, 0, 1, 1, 2, 3, 4])
    depths = np.array([0, 1, 1, 1, 2, 2, 2, 2, 3])
    tokens = jnp.asarray([[100, 5, 9, 9, 7, 8, 3, 3, 4]])
    for quota, expect in ((6, [(9, 0), (8, 1), (3, 4), (4, 3)]), (2, [(9, 0), (8, 1)])):
        tree = graft_retrieved(draft, jnp.asarray([3]), tokens, parents, depths, jnp.asarray([quota]), 8)
        got = [(int(t), int(p)) for t, p, v in zip(tree.tokens[0, 4:], tree.parents[0, 4:], tree.valid[0, 4:]) if v]
        assert got == expect  # new nodes fill slots 4, 5, ... in priority order; merged ones take none
        assert np.asarray(tree.tokens[0, :4]).tolist() == [100, 5, 6, 7] and bool(tree.valid[0, :4].all())
        assert_single_valued(tree)
        assert int(tree.valid.sum()) == 4 + len(expect) and tree.size == n


def reference_union(draft_paths, prio_tokens, parents, quota):
    """Trie union by hand: retrieved paths in priority order, the first `quota` new ones kept."""
    out, new, tpaths = set(draft_paths), 0, [()]
    root = next(p for p in draft_paths if len(p) == 1)
    for i in range(1, len(prio_tokens)):
        tpaths.append(tpaths[parents[i]] + (prio_tokens[i],))
        path = root + tpaths[i]
        if path in out or path[:-1] not in out:
            continue
        if new < quota:
            out.add(path)
            new += 1
    return out


@functools.cache
def merge_jit(size):
    t = graft_templates()
    return jax.jit(lambda *a: graft_retrieved(*a[:3], t.parents[:size], t.depths[:size], a[3], 8))


def test_merge_matches_a_trie_union():
    """Random draft trees and retrieval tokens from a small vocabulary (many collisions, duplicate rows)."""
    t = graft_templates()
    run, _ = pruned_builder(DEPTH, True)
    rng = np.random.default_rng(5)
    vocab = 6
    for trial in range(3):
        table = np.full((V, V), -np.inf, np.float32)
        table[:, :vocab] = log_softmax(rng.normal(size=(V, vocab)) * 2)
        roots = rng.integers(0, vocab, 3)
        stages = rng.integers(0, 4, 3)
        draft, info = run(jnp.asarray(table), jnp.asarray(roots), jnp.asarray([FORCE[s] for s in stages]))
        adj = rng.integers(0, vocab, (V, 8))  # rows with repeated successors, as cold rows have
        size = (20, 36, 52)[trial % 3]
        tok = np.zeros((3, size), np.int32)
        tok[:, 0] = roots
        pool_parents = t.parents[:size]
        ranks = t.pool.ranks[t.order[:size]]
        for i in range(1, size):
            tok[:, i] = adj[tok[:, pool_parents[i]], ranks[i]]
        kept = np.asarray(KEEP)[np.asarray(info.stage)]
        quota = np.minimum(rng.integers(0, size, 3), BUDGET - 1 - kept)  # the slots past the kept draft nodes
        tree = merge_jit(size)(draft, jnp.asarray(kept), jnp.asarray(tok), jnp.asarray(quota))
        assert_single_valued(tree)
        for b in range(3):
            assert paths(tree, b) == reference_union(paths(draft, b), tok[b].tolist(), pool_parents, quota[b])
            np.testing.assert_array_equal(tree.tokens[b, : 1 + kept[b]], draft.tokens[b, : 1 + kept[b]])


# --- calibration and state files ------------------------------------------------------------------------------------

@pytest.mark.parametrize("depth,tau", [(0, 0.3), (1, 0.1), (5, 0.02)])
def test_fit_thresholds(depth, tau):
    """Synthetic warm-up: the path passes the checkpoint's level with chance sigmoid(3 (log c − log τ))."""
    rng = np.random.default_rng(depth)
    log_conf = rng.uniform(np.log(1e-3), 0, size=(3000, 1))
    passed = rng.uniform(size=3000) < 1 / (1 + np.exp(-3 * (log_conf[:, 0] - np.log(tau))))
    accepted = np.where(passed, depth + 2 + rng.integers(0, 3, 3000), rng.integers(0, depth + 2, 3000))
    fitted = fit_thresholds(log_conf, accepted, (depth,))
    assert fitted[0] == pytest.approx(tau, rel=0.25)
    np.testing.assert_array_equal(fitted, fit_thresholds(log_conf, accepted, (depth,)))
    assert fit_thresholds(log_conf, np.full(3000, 9), (depth,)).tolist() == [0]  # always went past: never prune
    assert fit_thresholds(log_conf, np.zeros(3000, int), (depth,)).tolist() == [1]  # never did: always prune


@pytest.fixture(scope="module")
def tiny():
    """A tiny random target (peaked distributions) with a random EAGLE-3 drafter tapping its two layers."""
    vocab = 16
    cfg = ModelConfig(family="llama", vocab_size=vocab, hidden_size=32, intermediate_size=64, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=8, rms_norm_eps=1e-6, max_position=512)
    graphdef, params = nnx.split(Decoder(cfg, dtype=jnp.float32, rngs=nnx.Rngs(3)))
    params = jax.tree.map(lambda x: x * 8.0 if x.ndim == 2 else x, params)
    target = LoadedModel(name="tiny", cfg=cfg, graphdef=graphdef, params=params,
                         tokenizer=types.SimpleNamespace(eos_token_ids=()), dtype="float32", chat=False)
    taps = (0, 1, 1)
    dcfg = Eagle3Config(hidden_size=32, num_heads=4, num_kv_heads=2, head_dim=8, intermediate_size=64,
                        rms_norm_eps=1e-6, rope=cfg.rope, target_hidden_size=32, draft_vocab_size=vocab,
                        vocab_size=vocab, tap_layers=taps)
    d_graphdef, d_params = nnx.split(Eagle3Drafter(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(1)))

    def method(name, **options):
        extra = {"vocab_size": vocab} if name == "graft" else {}
        m = get_method(name, drafter=d_graphdef, taps=taps, top_k=3, depth=7, budget=20, **{**extra, **options})
        return m, {"drafter": d_params, "embed": params["embed"][...]}

    return target, method


def test_calibration_is_reproducible_from_a_seed(tiny, tmp_path):
    target, method = tiny
    graft, params = method("graft")
    pool = [np.random.default_rng(i).integers(0, 16, 6 + i).tolist() for i in range(6)]
    runs = [calibrate(target, graft, params, pool, warmup=2, max_new_tokens=12, seed=s, progress=False)
            for s in (3, 3, 4)]
    (s1, log1), (s2, log2), (_, log3) = runs
    np.testing.assert_array_equal(s1.thresholds, s2.thresholds)
    np.testing.assert_array_equal(s1.adjacency.table, s2.adjacency.table)
    np.testing.assert_array_equal(log1["log_conf"], log2["log_conf"])
    assert not np.array_equal(log1["log_conf"], log3["log_conf"])  # another seed draws other prompts
    assert log1["log_conf"].shape[1] == 3 and len(log1["accepted"]) >= 4
    assert np.all(log1["log_conf"][:, 0] >= log1["log_conf"][:, 1])  # deeper levels: lower cumulative confidence
    assert int((np.asarray(s1.adjacency.table) != 0).any(axis=1).sum()) > 3  # warmed from the verified nodes
    np.testing.assert_array_equal(s1.thresholds, fit_thresholds(log1["log_conf"], log1["accepted"], (0, 1, 5)))

    # One state file: graft reads thresholds + adjacency, eagle3_pruned the thresholds.
    path = tmp_path / "graft.npz"
    graft.save_state(s1, path)
    loaded = graft.load_state(path)
    np.testing.assert_array_equal(loaded.thresholds, s1.thresholds)
    np.testing.assert_array_equal(loaded.adjacency.table, s1.adjacency.table)
    pruned, _ = method("eagle3_pruned")
    assert pruned.load_state(path).adjacency is None
    pruned.save_state(pruned.load_state(path), tmp_path / "thresholds.npz")
    with pytest.raises(UserError, match="thresholds only"):
        graft.load_state(tmp_path / "thresholds.npz")
    other, _ = method("graft", vocab_size=32)
    with pytest.raises(UserError, match="adjacency matrix"):
        other.load_state(path)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(UserError, match="not a readable"):
        graft.load_state(tmp_path / "bad.npz")
    adjacency.save(s1.adjacency, tmp_path / "tr.npz")
    with pytest.raises(UserError, match="not a readable"):
        graft.load_state(tmp_path / "tr.npz")


# --- the real SmolLM2-135M with a random EAGLE-3 drafter --------------------------------------------------------------

PROMPTS = ["Write a Python function that checks whether a number is prime.",
           "List the planets of the solar system in order from the sun.",
           "Repeat this sentence twice: the quick brown fox jumps over the lazy dog.",
           "Explain what a hash map is to a beginner.", "Write a haiku about the sea."]
NEW_TOKENS = 64
CACHE = 512


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):
    m = load_model(str(smollm2_gguf), dtype="float32", progress=False)
    # A reduced draft vocabulary (ids 0..4095) keeps the random drafter's LM head cheap on CPU.
    cfg = Eagle3Config.for_target(m.cfg, draft_vocab_size=4096)
    graphdef, params = nnx.split(Eagle3Drafter(cfg, dtype=jnp.float32, rngs=nnx.Rngs(0)))
    ids = [m.tokenizer.encode_chat([{"role": "user", "content": p}]) for p in PROMPTS]
    vanilla = generate(m.graphdef, m.params, ids, max_new_tokens=NEW_TOKENS, eos_ids=m.eos_token_ids,
                       max_cache_len=CACHE).tokens
    return m, graphdef, params, ids, vanilla


GREEDY_TOKENS = 32  # of vanilla's 64: every stage is forced from the first step, so 32 already cover each many times


@pytest.mark.real_model
@pytest.mark.parametrize("name,options,ragged", [("eagle3_pruned", {}, True), ("graft", {}, True),
                                                 ("graft", {"fixed_split": 13}, False)],
                         ids=["eagle3_pruned", "graft", "graft-fixed-split"])
def test_greedy_equals_vanilla(smollm2, name, options, ragged):
    """4 prompts x 32 tokens at batch 1 (hot start; each forced to its own stage) and a ragged batch of 3 (one stage per
    row; the fixed split changes no per-row code, so it skips that compilation). Budget 20 (8 stages' worth of shapes
    as at 60, a third of the verify cost on CPU)."""
    m, graphdef, params, ids, vanilla = smollm2
    method, mp = eagle3_method(m, graphdef, params, name=name, budget=20, top_k=4, **options)
    kw = dict(max_new_tokens=GREEDY_TOKENS, eos_ids=m.eos_token_ids, max_cache_len=CACHE, method_params=mp,
              pad_to=max(map(len, ids)))
    state = method.init_state(mp, 1, CACHE)
    for i, (prompt, expected) in enumerate(zip(ids[:len(FORCE)], vanilla)):
        state = dataclasses.replace(state, thresholds=jnp.asarray(FORCE[i]))
        res = spec_decode.speculative_generate(m.graphdef, m.params, [prompt], method=method, method_state=state,
                                               **kw)
        assert res.tokens[0] == expected[:GREEDY_TOKENS], (name, options, i)
        state = res.method_state
    if not ragged:
        return
    rows = [0, 2, 4]
    state = dataclasses.replace(state, thresholds=jnp.asarray([FORCE[s] for s in (0, 1, 3)]))
    res = spec_decode.speculative_generate(m.graphdef, m.params, [ids[i] for i in rows], method=method,
                                           method_state=state, **kw)
    assert res.tokens == [vanilla[i][:GREEDY_TOKENS] for i in rows]


def first_step(m, method, mp, state, ids):
    """(tree, accepted tokens) of the first speculative step from context `ids`."""
    assert len(ids) <= 128
    tokens, lens = pad_prompts([ids], CACHE, width=128)  # one width for every context: one prefill compilation
    st = spec_decode._prefill_jit(m.graphdef, m.params, jnp.asarray(tokens), jnp.asarray(lens), jax.random.key(0),
                                  mp, jax.tree.map(jnp.copy, method.resume_state(mp, state, 1, CACHE)),  # consumed
                                  method=method, sampling=Sampling(),
                                  max_new_tokens=32, eos_ids=(), max_cache_len=CACHE, cache_dtype=jnp.float32)
    tree, nxt = _propose_and_step(m.graphdef, m.params, mp, st, method=method)
    return tree, int(nxt.accepted[0, 1])


@functools.partial(jax.jit, static_argnames=("graphdef", "method"))
def _propose_and_step(graphdef, params, mp, st, *, method):
    ctx = Context(root=st.root, history=st.history, history_len=st.cache.lengths + 1, lengths=st.cache.lengths)
    tree, _ = method.propose(mp, st.method_state, ctx)
    return tree, spec_decode._spec_step(nnx.merge(graphdef, params), method, mp, st, Sampling(), (), 32)


@pytest.mark.real_model
def test_graft_tree_contains_the_pruned_tree(smollm2):
    """From identical contexts (prefixes of a vanilla trajectory) and every stage: graft's tree ⊇ eagle3_pruned's
    (as token paths) and it accepts at least as many tokens; with an adjacency matrix warmed on the trajectory it
    accepts strictly more somewhere."""
    m, graphdef, params, ids, vanilla = smollm2
    pruned, mp = eagle3_method(m, graphdef, params, name="eagle3_pruned")
    graft, _ = eagle3_method(m, graphdef, params, name="graft")
    warm = spec_decode.speculative_generate(m.graphdef, m.params, [ids[0]], method=graft, method_params=mp,
                                            max_new_tokens=NEW_TOKENS, eos_ids=(), max_cache_len=CACHE).method_state
    gains = []
    for cut in (4, 20, 36):
        context = ids[0] + vanilla[0][:cut]
        for stage in range(4):
            thresholds = jnp.asarray(FORCE[stage])
            p_tree, p_acc = first_step(m, pruned, mp, dataclasses.replace(pruned.init_state(mp, 1, CACHE),
                                                                          thresholds=thresholds), context)
            g_tree, g_acc = first_step(m, graft, mp, dataclasses.replace(warm, thresholds=thresholds), context)
            assert paths(p_tree, 0) <= paths(g_tree, 0)
            assert_single_valued(g_tree)
            assert len(paths(p_tree, 0)) == 1 + graft_stages(60).draft[stage]
            assert g_acc >= p_acc >= 1
            gains.append(g_acc - p_acc)
            if stage == 3:
                assert paths(g_tree, 0) == paths(p_tree, 0)  # not pruned: nothing retrieved
    assert max(gains) > 0, gains


@pytest.mark.real_model
def test_cli_calibrate_then_generate(smollm2, tmp_path):
    from jspec.io.eagle3_checkpoint import save_eagle3_checkpoint

    m, graphdef, params, _, _ = smollm2
    drafter = tmp_path / "drafter"
    save_eagle3_checkpoint(nnx.merge(graphdef, params), drafter)
    state = tmp_path / "graft.npz"

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "jspec.cli", *args, "--dtype", "float32"], capture_output=True,
                              text=True, timeout=600)

    proc = cli("calibrate", "--method", "graft", "--drafter", str(drafter), "--warmup", "1", "--max-new-tokens", "8",
               "--out", str(state))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tau_0 = " in proc.stderr and "graft calibration" in proc.stderr
    proc = cli("generate", "--method", "graft", "--drafter", str(drafter), "--method-state", str(state),
               "--fixed-split", "40", "--prompt", "Hi", "--max-new-tokens", "6", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '"method": "graft"' in proc.stdout
    proc = cli("generate", "--method", "pld", "--fixed-split", "40", "--prompt", "Hi")
    assert proc.returncode == 2 and proc.stderr.strip() == "jspec: error: --fixed-split applies to --method graft only"
