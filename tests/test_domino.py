"""Domino head: GRU + low-rank correction vs an independent NumPy reference (PyTorch GRU equations), greedy and sampled
sequential drafting, and official Domino checkpoints."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from test_dflash import CFG as DFLASH_CFG
from test_dflash import TARGET, official_config, official_tensors, write_checkpoint
from test_sampling_lossless import chi_square_pvalue

from jspec.drafters.domino import DominoConfig, DominoDrafter, DominoHead
from jspec.errors import UserError
from jspec.io.dflash_checkpoint import load_dflash_checkpoint

V, H, G, R = 96, 32, 16, 8
CFG = DominoConfig(dataclasses.replace(DFLASH_CFG, shift_label=True), gru_hidden=G, rank=R, prefix_len=1)
N = CFG.backbone.num_drafts  # 5


def head_tensors(seed: int) -> dict[str, np.ndarray]:
    """Official names; the correction is scaled to move the argmax of O(1) base logits."""
    rng = np.random.default_rng(seed)
    return {"prefix_gru.weight_ih_l0": rng.normal(size=(3 * G, H)) / np.sqrt(H),
            "prefix_gru.weight_hh_l0": rng.normal(size=(3 * G, G)) / np.sqrt(G),
            "embed_proj.0.weight": rng.normal(size=(R, H + G)) / np.sqrt(H + G),
            "embed_proj.2.weight": 2 * rng.normal(size=(V, R))}


# ---- NumPy reference (float64) -------------------------------------------------------------------------------------

def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def np_gru(w, x, h):
    """torch.nn.GRU(bias=False), gate order r, z, n."""
    gi, gh = w["prefix_gru.weight_ih_l0"] @ x, w["prefix_gru.weight_hh_l0"] @ h
    r = _sigmoid(gi[:G] + gh[:G])
    z = _sigmoid(gi[G : 2 * G] + gh[G : 2 * G])
    n = np.tanh(gi[2 * G :] + r * gh[2 * G :])
    return (1 - z) * n + z * h


def np_delta(w, z, h):
    a = w["embed_proj.0.weight"] @ np.concatenate([z, h])
    return w["embed_proj.2.weight"] @ (a * _sigmoid(a))


def np_teacher_forced(w, embed, hidden, base, prev, prefix_len):
    h, out = np.zeros(G), []
    for i in range(len(prev)):
        h = np_gru(w, embed[prev[i]], h)
        out.append(base[i] + (np_delta(w, hidden[i], h) if i >= prefix_len else 0))
    return np.stack(out)


def np_greedy(w, embed, hidden, base, bonus, prefix_len):
    h, tokens = np_gru(w, embed[bonus], np.zeros(G)), []
    for i in range(len(base)):
        logits = base[i] + (np_delta(w, hidden[i], h) if i >= prefix_len else 0)
        tokens.append(int(np.argmax(logits)))
        h = np_gru(w, embed[tokens[-1]], h)
    return tokens


def make_head(w, prefix_len=1, cfg=CFG) -> DominoHead:
    head = DominoHead(dataclasses.replace(cfg, prefix_len=prefix_len), jnp.float32, nnx.Rngs(0))
    for name, attr in (("prefix_gru.weight_ih_l0", "w_ih"), ("prefix_gru.weight_hh_l0", "w_hh"),
                       ("embed_proj.0.weight", "w1"), ("embed_proj.2.weight", "w2")):
        getattr(head, attr)[...] = jnp.asarray(w[name], jnp.float32)
    return head


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(1)
    embed = rng.normal(size=(V, H))
    hidden = rng.normal(size=(3, N, H))
    base = rng.normal(size=(3, N, V))
    return embed, hidden, base, rng.integers(0, V, 3)


def _j(*xs):
    return [jnp.asarray(x, jnp.float32) if np.issubdtype(np.asarray(x).dtype, np.floating) else jnp.asarray(x)
            for x in xs]


@pytest.mark.parametrize("prefix_len", [1, 0])
def test_greedy_drafts_match_numpy_reference(inputs, prefix_len):
    w = head_tensors(0)
    embed, hidden, base, bonus = inputs
    head = make_head(w, prefix_len)
    got = np.asarray(nnx.jit(lambda hd, *a: hd.draft(*a, platform="reference"))(head, *_j(embed, hidden, base, bonus)))
    want = [np_greedy(w, embed, hidden[b], base[b], bonus[b], prefix_len) for b in range(3)]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[:, :prefix_len], np.argmax(base[:, :prefix_len], -1))  # uncorrected prefix
    assert np.any(got[:, prefix_len:] != np.argmax(base[:, prefix_len:], -1))  # the head changed some drafts


def test_teacher_forced_logits_match_reference_and_greedy_drafting(inputs):
    w = head_tensors(2)
    embed, hidden, base, bonus = inputs
    head = make_head(w)
    rng = np.random.default_rng(3)
    prev = rng.integers(0, V, (3, N))
    got = nnx.jit(DominoHead.teacher_forced_logits)(head, *_j(embed, hidden, base, prev))
    for b in range(3):
        np.testing.assert_allclose(np.asarray(got[b]), np_teacher_forced(w, embed, hidden[b], base[b], prev[b], 1),
                                   rtol=1e-5, atol=1e-4)
    # Greedy drafting = argmax of the teacher-forced logits when the GRU reads (bonus, the drafts so far).
    drafts = head.draft(*_j(embed, hidden, base, bonus), platform="reference")
    prev = jnp.concatenate([jnp.asarray(bonus)[:, None], drafts[:, :-1]], axis=1)
    tf = head.teacher_forced_logits(*_j(embed, hidden, base), prev)
    np.testing.assert_array_equal(np.asarray(drafts), np.asarray(jnp.argmax(tf, -1)))


def test_sampled_drafts_follow_the_corrected_distribution():
    """Two drafts, both corrected (prefix 0): the joint law is p(d0 | bonus) p(d1 | bonus, d0), computed exactly."""
    vocab, samples, temperature = 6, 4000, 0.7
    rng = np.random.default_rng(4)
    w = head_tensors(5)
    w["embed_proj.2.weight"] = w["embed_proj.2.weight"][:vocab]
    embed, hidden, base = rng.normal(size=(vocab, H)), rng.normal(size=(2, H)), rng.normal(size=(2, vocab))
    cfg = DominoConfig(dataclasses.replace(CFG.backbone, vocab_size=vocab, mask_token_id=0), G, R)
    head = make_head(w, prefix_len=0, cfg=cfg)
    key = jax.random.key(0)

    def choose(logits, i):
        return jax.random.categorical(jax.random.fold_in(key, i), logits / temperature).astype(jnp.int32)

    embed_j, hidden_j, base_j = _j(embed, hidden, base)
    drafts = nnx.jit(lambda hd, *a: hd.draft(*a, choose=choose))(
        head, embed_j, jnp.broadcast_to(hidden_j, (samples, 2, H)), jnp.broadcast_to(base_j, (samples, 2, vocab)),
        jnp.full((samples,), 3, jnp.int32))
    counts = np.zeros((vocab, vocab), np.int64)
    np.add.at(counts, tuple(np.asarray(drafts).T), 1)

    def softmax(x):
        e = np.exp((x - x.max()) / temperature)
        return e / e.sum()

    h0 = np_gru(w, embed[3], np.zeros(G))
    p0 = softmax(base[0] + np_delta(w, hidden[0], h0))
    joint = np.stack([p0[a] * softmax(base[1] + np_delta(w, hidden[1], np_gru(w, embed[a], h0))) for a in range(vocab)])
    assert chi_square_pvalue(counts, joint) > 1e-3
    # The same counts against the law without the GRU's dependence on d0 are rejected: the test has power.
    independent = np.outer(p0, softmax(base[1] + np_delta(w, hidden[1], h0)))
    assert chi_square_pvalue(counts, independent) < 1e-6


def test_candidate_drafts_are_the_best_corrected_candidates(inputs):
    """With k candidates, draft i is the argmax of the corrected logits over its row's k highest base logits (the GRU
    having read the bonus and the drafts before it); k = V is the full-vocabulary head; k = 1 leaves the backbone's
    argmax."""
    w = head_tensors(0)
    embed, hidden, base, bonus = inputs
    head = make_head(w)
    args = _j(embed, hidden, base, bonus)
    full = head.draft(*args, platform="reference")
    np.testing.assert_array_equal(np.asarray(head.draft(*args, candidates=V)), np.asarray(full))
    np.testing.assert_array_equal(np.asarray(head.draft(*args, candidates=1)), np.argmax(base, -1))
    k = 4
    drafts = nnx.jit(lambda hd, *a: hd.draft(*a, candidates=k))(head, *args)
    prev = jnp.concatenate([jnp.asarray(bonus)[:, None], drafts[:, :-1]], axis=1)
    tf = np.asarray(head.teacher_forced_logits(*_j(embed, hidden, base), prev))
    top = np.argsort(-base, axis=-1)[..., :k]
    best = np.take_along_axis(top, np.argmax(np.take_along_axis(tf, top, -1), -1)[..., None], -1)[..., 0]
    np.testing.assert_array_equal(np.asarray(drafts), best)
    assert np.any(np.asarray(drafts) != np.argmax(base, -1))  # the head still moves drafts within the candidates


@pytest.mark.parametrize("candidates", [0, 4])
def test_head_drafts_correct_only_the_first_m_drafts(inputs, candidates):
    """`head_drafts` = m: drafts 0 .. m − 1 are the full head's (the GRU reads the same tokens up to there), later
    drafts are the base argmax; m >= N is the whole head."""
    w = head_tensors(0)
    embed, hidden, base, bonus = inputs
    head = make_head(w)
    args = _j(embed, hidden, base, bonus)
    full = np.asarray(head.draft(*args, platform="reference", candidates=candidates))
    m = 3
    got = np.asarray(nnx.jit(lambda hd, *a: hd.draft(*a, platform="reference", candidates=candidates,
                                                      head_drafts=m))(head, *args))
    np.testing.assert_array_equal(got[:, :m], full[:, :m])
    np.testing.assert_array_equal(got[:, m:], np.argmax(base[:, m:], -1))
    assert np.any(full[:, m:] != np.argmax(base[:, m:], -1))  # the head would have moved some of the later drafts
    np.testing.assert_array_equal(np.asarray(head.draft(*args, platform="reference", candidates=candidates,
                                                        head_drafts=N)), full)


@pytest.mark.parametrize("candidates", [0, 4])
def test_gru_input_table_drafts_like_the_w_ih_gemv(inputs, candidates):
    """`input_table` rows are W_ih · E[token]: drafting from the table gives the GEMV's drafts (float32)."""
    w = head_tensors(2)
    embed, hidden, base, bonus = inputs
    head = make_head(w)
    args = _j(embed, hidden, base, bonus)
    table = head.input_table(args[0])
    np.testing.assert_allclose(np.asarray(table), embed @ w["prefix_gru.weight_ih_l0"].T, rtol=1e-4, atol=1e-4)
    kw = dict(platform="reference", candidates=candidates)
    np.testing.assert_array_equal(np.asarray(head.draft(*args, table=table, **kw)), np.asarray(head.draft(*args, **kw)))


def test_sampled_candidate_drafts_stay_among_the_candidates(inputs):
    w = head_tensors(1)
    embed, hidden, base, bonus = inputs
    key = jax.random.key(1)
    drafts = make_head(w, prefix_len=0).draft(
        *_j(embed, hidden, base, bonus), candidates=3,
        choose=lambda logits, i: jax.random.categorical(jax.random.fold_in(key, i), logits).astype(jnp.int32))
    top = np.argsort(-base, axis=-1)[..., :3]
    assert np.all(np.any(top == np.asarray(drafts)[..., None], axis=-1))


def test_official_domino_checkpoint_loads(tmp_path, inputs):
    backbone = official_tensors(6)
    w = head_tensors(7)
    config = official_config(**{"projector_type": "domino", "gru_hidden_dim": G, "emb_dim": R,
                                "pure_draft_prefix_len": 1, "shift_label": True})
    write_checkpoint(tmp_path / "domino", backbone | w, config)
    loaded = load_dflash_checkpoint(tmp_path / "domino", TARGET)
    assert isinstance(loaded, DominoDrafter) and loaded.cfg == CFG
    embed, hidden, base, bonus = inputs
    got = loaded.head.draft(*_j(embed, hidden, base, bonus), platform="reference")
    np.testing.assert_array_equal(np.asarray(got), [np_greedy(w, embed, hidden[b], base[b], bonus[b], 1)
                                                    for b in range(3)])


@pytest.mark.parametrize("damage, extra, message", [
    (lambda w: {k: v for k, v in w.items() if k != "prefix_gru.weight_hh_l0"}, {},
     r"missing 1 Domino tensors.*prefix_gru\.weight_hh_l0"),
    (lambda w: w | {"embed_proj.2.weight": w["embed_proj.2.weight"][:90]}, {},
     r"embed_proj\.2\.weight has shape \(90, 8\), expected \(96, 8\)"),
    (lambda w: w, {"gru_hidden_dim": 32}, r"prefix_gru\.weight_ih_l0 has shape \(48, 32\), expected \(96, 32\)"),
    (lambda w: w, {"emb_dim": None}, "lacks or mangles"),
    (lambda w: w, {"pure_draft_prefix_len": 9}, "prefix length 9"),
])
def test_domino_checkpoint_errors(tmp_path, damage, extra, message):
    fields = {"projector_type": "domino", "gru_hidden_dim": G, "emb_dim": R, "shift_label": True} | extra
    write_checkpoint(tmp_path / "bad", damage(official_tensors(6) | head_tensors(7)), official_config(**fields))
    with pytest.raises(UserError, match=message):
        load_dflash_checkpoint(tmp_path / "bad", TARGET)
