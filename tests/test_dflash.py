"""DFlash drafter: forward vs an independent NumPy reference of z-lab/dflash's model, incremental context cache,
official checkpoints; the dflash / domino methods in the speculative loop (float32 greedy = vanilla)."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
from flax import nnx

from jspec.config import ModelConfig, RopeConfig
from jspec.decode import generate
from jspec.drafters.dflash import DFlashConfig, DFlashDrafter, dflash_tap_layers
from jspec.drafters.domino import DominoConfig, DominoDrafter
from jspec.errors import UserError
from jspec.io.dflash_checkpoint import build_drafter, load_dflash_checkpoint, save_dflash_checkpoint
from jspec.methods import build, dflash_method
from jspec.methods.base import Context
from jspec.methods.dflash import DFlash
from jspec.models.cache import KVCache, causal_block_mask
from jspec.models.decoder import Decoder
from jspec.models.loading import LoadedModel
from jspec.spec_decode import speculative_generate

TARGET = ModelConfig(family="qwen3", vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=8, num_heads=4,
                     num_kv_heads=2, head_dim=8, rms_norm_eps=1e-6, rope=RopeConfig(theta=10000.0), qk_norm=True)
CFG = DFlashConfig.for_target(TARGET, num_layers=2, block_size=5, mask_token_id=90)
H, V = 32, 96


def official_tensors(seed: int, cfg: DFlashConfig = CFG) -> dict[str, np.ndarray]:
    """Random weights under z-lab/dflash's state-dict names (float64; O(1) activations)."""
    rng = np.random.default_rng(seed)
    h, f, q, kv, hd = cfg.hidden_size, cfg.intermediate_size, cfg.q_size, cfg.kv_size, cfg.head_dim

    def mat(out, inp):
        return rng.normal(size=(out, inp)) / np.sqrt(inp)

    def norm(n=h):
        return 1 + 0.2 * rng.normal(size=n)

    tensors = {"fc.weight": mat(h, cfg.feature_size), "hidden_norm.weight": norm(), "norm.weight": norm()}
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": norm(), p + "post_attention_layernorm.weight": norm(),
            p + "self_attn.q_proj.weight": mat(q, h), p + "self_attn.k_proj.weight": mat(kv, h),
            p + "self_attn.v_proj.weight": mat(kv, h), p + "self_attn.o_proj.weight": mat(h, q),
            p + "self_attn.q_norm.weight": norm(hd), p + "self_attn.k_norm.weight": norm(hd),
            p + "mlp.gate_proj.weight": mat(f, h), p + "mlp.up_proj.weight": mat(f, h),
            p + "mlp.down_proj.weight": mat(h, f),
        }
        if cfg.attention_bias:
            tensors |= {p + f"self_attn.{n}_proj.bias": 0.1 * rng.normal(size=s)
                        for n, s in (("q", q), ("k", kv), ("v", kv), ("o", h))}
    return tensors


def official_config(cfg: DFlashConfig = CFG, **dflash_config) -> dict:
    return {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": cfg.hidden_size,
            "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_layers,
            "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
            "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope.theta, "rope_scaling": None,
            "attention_bias": cfg.attention_bias, "vocab_size": cfg.vocab_size, "block_size": cfg.block_size,
            "num_target_layers": TARGET.num_layers, "layer_types": ["full_attention"] * cfg.num_layers,
            "dflash_config": {"mask_token_id": cfg.mask_token_id, "target_layer_ids": list(cfg.tap_layers)}
            | dflash_config}


def write_checkpoint(path, tensors, config):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    safetensors.numpy.save_file({k: np.ascontiguousarray(v.astype(np.float32)) for k, v in tensors.items()},
                                str(path / "model.safetensors"))


# ---- NumPy reference of DFlashDraftModel.forward (float64, one row) -----------------------------------------------

def _rms(x, g, eps=CFG.rms_norm_eps):
    return g * x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)


def _rope(x, positions):  # x [T, heads, D], half-split layout
    d = x.shape[-1]
    angles = positions[:, None] * (CFG.rope.theta ** (-np.arange(0, d, 2) / d))
    cos, sin = np.cos(angles)[:, None], np.sin(angles)[:, None]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def reference_block(w, embed, features, block, cfg=CFG):
    """Block at positions P .. P + T - 1 over the context of `features` [P, F] (positions 0 .. P - 1)."""
    hd, nh, nkv = cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
    ctx = _rms(features @ w["fc.weight"].T, w["hidden_norm.weight"])
    p, t = len(features), len(block)
    pos_ctx, pos_blk = np.arange(p), np.arange(p, p + t)
    x = embed[block]

    def lin(x, name):
        out = x @ w[name + ".weight"].T
        return out + w[name + ".bias"] if name + ".bias" in w else out

    for i in range(cfg.num_layers):
        a = f"layers.{i}.self_attn."
        xn = _rms(x, w[f"layers.{i}.input_layernorm.weight"])
        q = _rope(_rms(lin(xn, a + "q_proj").reshape(t, nh, hd), w[a + "q_norm.weight"]), pos_blk)
        keys = np.concatenate([_rope(_rms(lin(y, a + "k_proj").reshape(-1, nkv, hd), w[a + "k_norm.weight"]), pos)
                               for y, pos in ((ctx, pos_ctx), (xn, pos_blk))])
        values = np.concatenate([lin(y, a + "v_proj").reshape(-1, nkv, hd) for y in (ctx, xn)])
        out = np.zeros((t, nh, hd))
        for j in range(t):  # non-causal: every block token sees the whole context and the whole block
            for head in range(nh):
                kv_head = head // (nh // nkv)
                scores = keys[:, kv_head] @ q[j, head] / np.sqrt(hd)
                probs = np.exp(scores - scores.max())
                out[j, head] = (probs / probs.sum()) @ values[:, kv_head]
        x = x + lin(out.reshape(t, nh * hd), a + "o_proj")
        y = _rms(x, w[f"layers.{i}.post_attention_layernorm.weight"])
        m = f"layers.{i}.mlp."
        gate, up = y @ w[m + "gate_proj.weight"].T, y @ w[m + "up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[m + "down_proj.weight"].T
    return _rms(x, w["norm.weight"])


@jax.jit
def _context(graphdef, state, features, positions, valid, cache):
    return nnx.merge(graphdef, state).write_context(features, positions, valid, cache)


@jax.jit
def _block(graphdef, state, embed, tokens, start, cache):
    return nnx.merge(graphdef, state)(embed, tokens, start, cache)


@pytest.fixture(scope="module")
def weights():
    return official_tensors(0)


@pytest.fixture(scope="module")
def embed():
    return np.random.default_rng(1).normal(size=(V, H))


def test_tap_layers_follow_dflash_rule():
    assert dflash_tap_layers(36, 5) == (1, 9, 17, 25, 33)  # Qwen3-8B: configs/qwen3-8b-domino.json
    assert dflash_tap_layers(28, 1) == (14,)
    assert dflash_tap_layers(30, 3) == (1, 14, 27)
    assert CFG.tap_layers == (1, 5)
    with pytest.raises(UserError, match="tap layers"):
        DFlashConfig.for_target(dataclasses.replace(TARGET, num_layers=2), num_layers=1)  # tap 1 = last layer


@pytest.mark.parametrize("bias", [False, True])
def test_block_matches_numpy_reference_and_context_is_incremental(embed, bias):
    """Row 0: context written at once; row 1: written in two chunks with a stale block in between (the scratch slots
    a block leaves behind are overwritten by the next context), and a shorter context."""
    cfg = dataclasses.replace(CFG, attention_bias=bias)
    w = official_tensors(3, cfg)
    drafter = build_drafter(cfg, w, "float32", "test")
    graphdef, state = nnx.split(drafter)
    rng = np.random.default_rng(2)
    feats = rng.normal(size=(2, 9, cfg.feature_size))
    lens = np.array([9, 6])
    blocks = np.concatenate([rng.integers(0, V, (2, 1)), np.full((2, cfg.block_size - 1), cfg.mask_token_id)], 1)
    cache = drafter.init_cache(2, 16, jnp.float32)
    f, pos = jnp.asarray(feats, jnp.float32), jnp.broadcast_to(jnp.arange(9), (2, 9))
    e = jnp.asarray(embed, jnp.float32)
    first = jnp.asarray([[True] * 9, [True] * 4 + [False] * 5])
    cache = _context(graphdef, state, f, pos, first, cache)
    _, cache = _block(graphdef, state, e, jnp.asarray(blocks), jnp.asarray([9, 4]), cache)  # stale scratch for row 1
    cache = _context(graphdef, state, f, pos, jnp.asarray([[False] * 9, [False] * 4 + [True] * 2 + [False] * 3]),
                     cache)
    hidden, _ = _block(graphdef, state, e, jnp.asarray(blocks), jnp.asarray(lens), cache)
    for row in range(2):
        want = reference_block(w, embed, feats[row, : lens[row]], blocks[row], cfg)
        np.testing.assert_allclose(np.asarray(hidden[row]), want, rtol=2e-4, atol=2e-4)


def test_official_checkpoint_loads_and_round_trips(weights, embed, tmp_path):
    write_checkpoint(tmp_path / "ckpt", weights, official_config())
    loaded = load_dflash_checkpoint(tmp_path / "ckpt", TARGET)
    assert isinstance(loaded, DFlashDrafter) and loaded.cfg == CFG
    save_dflash_checkpoint(loaded, tmp_path / "again", TARGET.num_layers)
    again = load_dflash_checkpoint(tmp_path / "again", TARGET)
    assert again.cfg == CFG
    for a, b in zip(jax.tree.leaves(nnx.state(loaded)), jax.tree.leaves(nnx.state(again))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # Taps default to DFlash's rule when the config leaves them out.
    cfg = official_config()
    del cfg["dflash_config"]["target_layer_ids"]
    write_checkpoint(tmp_path / "rule", weights, cfg)
    assert load_dflash_checkpoint(tmp_path / "rule", TARGET).cfg.tap_layers == (1, 5)


@pytest.mark.parametrize("damage, config, target, message", [
    (lambda w: {k: v for k, v in w.items() if k != "layers.1.self_attn.k_norm.weight"}, {}, TARGET,
     r"missing 1 DFlash tensors.*layers\.1\.self_attn\.k_norm\.weight"),
    (lambda w: w | {"fc.weight": w["fc.weight"].T}, {}, TARGET,
     r"fc\.weight has shape \(64, 32\), expected \(32, 64\)"),
    (lambda w: w | {"lm_head.weight": np.zeros((V, H))}, {}, TARGET, "not part of this drafter.*lm_head"),
    (lambda w: w, {}, dataclasses.replace(TARGET, vocab_size=97), "vocab mismatch.*96 tokens.*97"),
    (lambda w: w, {}, dataclasses.replace(TARGET, hidden_size=64, num_heads=8), "width 32 differs.*64"),
    (lambda w: w, {}, dataclasses.replace(TARGET, num_layers=9), "8-layer target.*9 layers"),
    (lambda w: w, {"dflash_config": {"target_layer_ids": [1, 5]}}, TARGET, "no dflash_config.mask_token_id"),
    (lambda w: w, {"layer_types": ["sliding_attention", "full_attention"]}, TARGET, "sliding-window"),
    (lambda w: w, {"dflash_config": {"mask_token_id": 90, "projector_type": "mlp"}}, TARGET, "projector_type 'mlp'"),
    (lambda w: w, {"dflash_config": {"mask_token_id": 90, "target_layer_ids": [1, 7]}}, TARGET, r"tap layers \[7\]"),
    (lambda w: w, {"num_attention_heads": "four"}, TARGET, "lacks or mangles"),
])
def test_checkpoint_errors(weights, tmp_path, damage, config, target, message):
    write_checkpoint(tmp_path / "bad", damage(weights), official_config() | config)
    with pytest.raises(UserError, match=message):
        load_dflash_checkpoint(tmp_path / "bad", target)


def test_missing_or_corrupt_files(weights, tmp_path):
    with pytest.raises(UserError, match="no such checkpoint directory"):
        load_dflash_checkpoint(tmp_path / "absent", TARGET)
    with pytest.raises(UserError, match="no config.json"):
        load_dflash_checkpoint(tmp_path, TARGET)
    write_checkpoint(tmp_path / "c", weights, official_config())
    (tmp_path / "c" / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(UserError, match="corrupt safetensors"):
        load_dflash_checkpoint(tmp_path / "c", TARGET)
    (tmp_path / "c" / "model.safetensors").unlink()
    with pytest.raises(UserError, match="no \\*.safetensors"):
        load_dflash_checkpoint(tmp_path / "c", TARGET)
    (tmp_path / "c" / "config.json").write_text("{")
    with pytest.raises(UserError, match="invalid JSON"):
        load_dflash_checkpoint(tmp_path / "c", TARGET)


# ---- the methods in the speculative loop ---------------------------------------------------------------------------

PROMPTS = [[3, 17, 42, 8, 8, 21], [5] * 3 + list(range(20, 40)), [77]]


@pytest.fixture(scope="module")
def tiny_target():
    graphdef, params = nnx.split(Decoder(TARGET, dtype=jnp.float32, rngs=nnx.Rngs(7)))
    params = jax.tree.map(lambda x: x * 6.0 if x.ndim == 2 else x, params)  # peaked, history-dependent outputs
    return LoadedModel(name="tiny", cfg=TARGET, graphdef=graphdef, params=params, tokenizer=None, dtype="float32",
                       chat=False)


def random_drafter(name: str, seed: int = 1):
    if name == "dflash":
        return DFlashDrafter(CFG, dtype=jnp.float32, rngs=nnx.Rngs(seed))
    cfg = DominoConfig(dataclasses.replace(CFG, shift_label=True), gru_hidden=16, rank=16)
    return DominoDrafter(cfg, dtype=jnp.float32, rngs=nnx.Rngs(seed))


@dataclasses.dataclass(frozen=True)
class OracleDFlash(DFlash):
    """Runs the real drafter (so its cache evolves as usual) but drafts vanilla's continuation with every seventh
    position wrong: acceptance lengths then vary from 0 to the whole block."""

    oracle: tuple[tuple[int, ...], ...] = ()
    prompt_lens: tuple[int, ...] = ()

    def propose(self, params, state, ctx):
        tree, state = super().propose(params, state, ctx)
        truth = jnp.asarray(self.oracle)
        done = ctx.lengths - jnp.asarray(self.prompt_lens)  # generated tokens before the root
        idx = done[:, None] + 1 + jnp.arange(self.num_drafts)[None, :]
        drafts = jnp.take_along_axis(truth, jnp.minimum(idx, truth.shape[1] - 1), axis=1)
        drafts = jnp.where(idx % 7 == 3, (drafts + 1) % V, drafts)
        tokens = tree.tokens.at[:, 1:].set(drafts)
        return dataclasses.replace(tree, tokens=tokens), state


KW = dict(max_new_tokens=40, max_cache_len=96)


@pytest.mark.parametrize("name,full_block", [("dflash", False), ("domino", False), ("domino", True)])
def test_random_drafter_greedy_equals_vanilla(tiny_target, name, full_block):
    m = tiny_target
    method, params = dflash_method(name, m, random_drafter(name), full_block=full_block)
    assert method.tree_size == CFG.block_size + full_block  # full_block: Domino's shift_label drafts all B rows
    vanilla = generate(m.graphdef, m.params, PROMPTS, **KW).tokens
    res = speculative_generate(m.graphdef, m.params, PROMPTS, method=method, method_params=params, **KW)
    assert res.tokens == vanilla


@pytest.mark.parametrize("chunk", [0, 8])  # 8: approximate candidates, the best of each of the 3 best chunks of 8
def test_candidate_restricted_domino_greedy_equals_vanilla(tiny_target, chunk):
    m = tiny_target
    method, params = dflash_method("domino", m, random_drafter("domino"), candidates=3, candidate_chunk=chunk)
    assert method.candidates == 3 and method.candidate_chunk == chunk
    vanilla = generate(m.graphdef, m.params, PROMPTS, **KW).tokens
    assert speculative_generate(m.graphdef, m.params, PROMPTS, method=method, method_params=params,
                                **KW).tokens == vanilla


@pytest.mark.parametrize("name", ["domino", "graft_tail"])
def test_head_on_the_first_drafts_only_greedy_equals_vanilla(tiny_target, name):
    m = tiny_target
    method, params = dflash_method(name, m, random_drafter("domino"), candidates=3, head_drafts=2)
    assert method.head_drafts == 2
    vanilla = generate(m.graphdef, m.params, PROMPTS, **KW).tokens
    assert speculative_generate(m.graphdef, m.params, PROMPTS, method=method, method_params=params,
                                **KW).tokens == vanilla
    with pytest.raises(UserError, match="no correction head"):
        dflash_method("graft_tail", m, random_drafter("dflash"), head_drafts=2)
    with pytest.raises(UserError, match="head_drafts must be >= 0"):
        dflash_method("domino", m, random_drafter("domino"), head_drafts=-1)


def block_drafts(m, name, drafter, **options):
    """The chain [root, drafts] one propose drafts after a random 8-token context."""
    rng = np.random.default_rng(5)
    prompt = rng.integers(0, 90, 9).tolist()
    features = jnp.asarray(rng.normal(size=(1, 8, CFG.feature_size)), jnp.float32)
    method, params = dflash_method(name, m, drafter, **options)
    n = len(prompt) - 1
    state = method.prefill(params, method.init_state(params, 1, 32), jnp.asarray([prompt[:n]]),
                           jnp.asarray([n]), jnp.asarray(prompt[n:]), features)
    ctx = Context(root=jnp.asarray(prompt[n:]), history=jnp.zeros((1, 32), jnp.int32),
                  history_len=jnp.asarray([n + 1]), lengths=jnp.asarray([n]))
    tree, _ = jax.jit(method.propose)(params, state, ctx)
    return np.asarray(tree.tokens)


def strong_head_drafter():
    drafter = random_drafter("domino", seed=3)
    drafter.head.w2[...] = drafter.head.w2[...] * 400.0  # a correction strong enough to change the drafts
    return drafter


@pytest.mark.parametrize("head_stop", [0.5, 0.99])  # 0.99: the head stops after (about) the first draft
def test_head_stop_greedy_equals_vanilla(tiny_target, head_stop):
    """The confidence-adaptive head stop only changes drafts, never the output."""
    m = tiny_target
    method, params = dflash_method("domino", m, strong_head_drafter(), candidates=3, head_stop=head_stop)
    assert method.head_stop == head_stop
    vanilla = generate(m.graphdef, m.params, PROMPTS, **KW).tokens
    assert speculative_generate(m.graphdef, m.params, PROMPTS, method=method, method_params=params,
                                **KW).tokens == vanilla


def test_head_stop_drafts(tiny_target):
    """Greedy drafts take each row's best candidate, of probability >= 1/k, so the running confidence stays >= k^-N:
    below that the head never stops (the full head's drafts). Near 1 it stops after the first draft (that of
    head_drafts = 1, here), and the later drafts take the base argmax."""
    m, drafter = tiny_target, strong_head_drafter()
    full = block_drafts(m, "domino", drafter, candidates=3)
    first = block_drafts(m, "domino", drafter, candidates=3, head_drafts=1)
    assert not np.array_equal(full, first)  # the head changes the later drafts of this block
    np.testing.assert_array_equal(block_drafts(m, "domino", drafter, candidates=3, head_stop=0.99), first)
    assert 0.003 < 3.0 ** -CFG.block_size  # below k^-N
    np.testing.assert_array_equal(block_drafts(m, "domino", drafter, candidates=3, head_stop=0.003), full)


@pytest.mark.parametrize("name, drafter, options, match", [
    ("dflash", "domino", {}, "dflash has no correction head"),  # dflash drafts with the Domino backbone alone
    ("graft_tail", "dflash", {}, "graft_tail has no correction head"),
    ("graft_tail", "domino", {"candidates": 3}, "not supported by graft_tail"),
    ("domino", "domino", {"candidates": 0}, "head_stop needs candidates > 0"),
    ("domino", "domino", {"candidates": 3, "draft_temperature": 0.7}, "greedy drafting only"),
])
def test_head_stop_needs_greedy_domino_with_candidates(tiny_target, name, drafter, options, match):
    with pytest.raises(UserError, match=match):
        dflash_method(name, tiny_target, random_drafter(drafter), head_stop=0.5, **options)


@pytest.mark.parametrize("head_stop", [1.0, -0.1])
def test_head_stop_out_of_range(tiny_target, head_stop):
    with pytest.raises(UserError, match=r"head_stop must be in \[0, 1\)"):
        dflash_method("domino", tiny_target, random_drafter("domino"), candidates=3, head_stop=head_stop)


def test_domino_with_the_gru_input_table_greedy_equals_vanilla(tiny_target):
    m = tiny_target
    method, params = dflash_method("domino", m, random_drafter("domino"), candidates=3, gru_table=True)
    assert params["gru_table"].shape == (V, 3 * 16)
    vanilla = generate(m.graphdef, m.params, PROMPTS, **KW).tokens
    assert speculative_generate(m.graphdef, m.params, PROMPTS, method=method, method_params=params,
                                **KW).tokens == vanilla
    with pytest.raises(UserError, match="GRU input table"):
        dflash_method("dflash", m, random_drafter("domino"), gru_table=True)


def test_dflash_on_a_domino_checkpoint_is_the_head_off_ablation(tiny_target):
    """`dflash` on a Domino drafter (bench label domino_headless) drafts from the backbone's base logits alone: the
    block Domino drafts once its correction is zeroed, and not the one its head drafts."""
    m, drafter = tiny_target, strong_head_drafter()
    headless, corrected = block_drafts(m, "dflash", drafter), block_drafts(m, "domino", drafter)
    drafter.head.w2[...] = jnp.zeros_like(drafter.head.w2[...])
    np.testing.assert_array_equal(headless, block_drafts(m, "domino", drafter))
    assert not np.array_equal(headless, corrected)


def test_candidates_need_a_domino_head_and_fit_the_vocabulary(tiny_target):
    with pytest.raises(UserError, match="no correction head"):
        dflash_method("graft_tail", tiny_target, random_drafter("dflash"), candidates=4)
    with pytest.raises(UserError, match="candidates must be in 0.."):
        dflash_method("domino", tiny_target, random_drafter("domino"), candidates=tiny_target.cfg.vocab_size + 1)


def test_oracle_drafts_are_lossless_and_the_context_cache_is_the_committed_sequence(tiny_target):
    m = tiny_target
    vanilla = generate(m.graphdef, m.params, PROMPTS, max_new_tokens=60, max_cache_len=96).tokens
    base, params = dflash_method("dflash", m, random_drafter("dflash"))
    method = OracleDFlash(**{f.name: getattr(base, f.name) for f in dataclasses.fields(DFlash)},
                          oracle=tuple(tuple(t) for t in vanilla), prompt_lens=tuple(map(len, PROMPTS)))
    res = speculative_generate(m.graphdef, m.params, PROMPTS, method=method, method_params=params, **KW)
    assert res.tokens == [t[:40] for t in vanilla]
    accepted = [a for row in res.accepted for a in row[1:]]
    assert max(accepted) == CFG.block_size and min(accepted) == 1 and np.mean(accepted) > 2

    # Independent computation: target taps over each committed sequence, then the drafter's context K/V.
    state = res.method_state
    committed = np.asarray(state.fed + state.pend_n)
    width = int(committed.max())
    seqs = np.zeros((len(PROMPTS), width), np.int32)
    for row, prompt in enumerate(PROMPTS):
        seqs[row, : committed[row]] = (prompt + vanilla[row])[: committed[row]]
    pos = jnp.broadcast_to(jnp.arange(width), seqs.shape)
    valid = pos < committed[:, None]

    @jax.jit
    def recompute(seqs):
        target = nnx.merge(m.graphdef, m.params)
        drafter = nnx.merge(method.drafter, params["drafter"])
        mask = causal_block_mask(jnp.zeros(len(PROMPTS), jnp.int32), valid)
        _, _, taps = target(seqs, pos, KVCache.init(TARGET, len(PROMPTS), width, jnp.float32), mask, method.taps)
        want = drafter.write_context(jnp.concatenate(taps, -1), pos, valid,
                                     drafter.init_cache(len(PROMPTS), width, jnp.float32))
        # The last accepted path is still pending in the state: write it like the next propose would.
        p = state.pend_feat.shape[1]
        got = drafter.write_context(state.pend_feat, state.fed[:, None] + jnp.arange(p)[None],
                                    jnp.arange(p)[None] < state.pend_n[:, None], state.cache)
        return want, got

    want, got = recompute(jnp.asarray(seqs))
    for row in range(len(PROMPTS)):
        n = committed[row]
        np.testing.assert_allclose(np.asarray(got.k[:, row, :n]), np.asarray(want.k[:, row, :n]), atol=2e-4)
        np.testing.assert_allclose(np.asarray(got.v[:, row, :n]), np.asarray(want.v[:, row, :n]), atol=2e-4)


def test_build_loads_checkpoints_and_refuses_mismatches(tiny_target, weights, tmp_path):
    write_checkpoint(tmp_path / "dflash", weights, official_config())
    method, params = build("dflash", tiny_target, str(tmp_path / "dflash"))
    assert method.name == "dflash" and method.taps == CFG.tap_layers and method.tree_size == CFG.block_size
    with pytest.raises(UserError, match="domino needs a Domino checkpoint"):
        build("domino", tiny_target, str(tmp_path / "dflash"))
    with pytest.raises(UserError, match="--drafter"):
        build("dflash", tiny_target)
    domino = random_drafter("domino")
    save_dflash_checkpoint(domino, tmp_path / "domino", TARGET.num_layers)
    method, _ = build("dflash", tiny_target, str(tmp_path / "domino"))  # the backbone alone
    assert method.name == "dflash" and method.shift_label and method.tree_size == CFG.block_size


@pytest.mark.real_model
@pytest.mark.parametrize("name", ["dflash", "domino"])
def test_smollm2_greedy_equals_vanilla(smollm2_vanilla, name):
    m, ids, kw, vanilla = smollm2_vanilla
    dcfg = DFlashConfig.for_target(m.cfg, num_layers=1, shift_label=name == "domino")
    drafter = (DFlashDrafter(dcfg, dtype=jnp.float32, rngs=nnx.Rngs(0)) if name == "dflash" else
               DominoDrafter(DominoConfig(dcfg, gru_hidden=64, rank=32), dtype=jnp.float32, rngs=nnx.Rngs(0)))
    method, params = dflash_method(name, m, drafter)
    assert speculative_generate(m.graphdef, m.params, ids, method=method, method_params=params, **kw).tokens == vanilla
