"""`jspec train eagle3` on a tiny random target: TTT equals the inference path, the loss falls, resumption is bit
for bit, damaged checkpoints are user errors, and the export drives the eagle3 method losslessly."""

import json
import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
from flax import nnx

from jspec.cli import main
from jspec.config import ModelConfig, RopeConfig
from jspec.decode import generate
from jspec.drafters.eagle3 import Eagle3Config, Eagle3Drafter
from jspec.errors import UserError
from jspec.io.eagle3_checkpoint import load_eagle3_checkpoint
from jspec.methods import build
from jspec.models.cache import BlockMask, causal_block_mask
from jspec.spec_decode import speculative_generate
from jspec.train import common
from jspec.train.distill import FORMAT, _write_shard
from jspec.train.eagle3 import (Eagle3TrainConfig, drafter_config, export_latest, learning_rate, load_records,
                               train_eagle3)
from jspec.train.packing import Batcher, pack
from jspec.train.ttt import shift_left, ttt_forward

from checkpoints import assert_same_run, drafter_tensors, run_metrics, truncate_checkpoint_arrays
import tiny_checkpoint
from tiny_checkpoint import TARGET, VOCAB

# Shared by the API tests so the jitted train step compiles once.
CFG = Eagle3TrainConfig(steps=30, batch_size=4, seq_len=64, lr=3e-2, warmup_steps=3, draft_vocab_size=48,
                        ttt_steps=3, eval_records=8, eval_every=10, save_every=100, log_every=5, seed=0,
                        intermediate_size=48)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return tiny_checkpoint.workspace(tmp_path_factory.mktemp("train_eagle3"))


@pytest.fixture(scope="module")
def trained(workspace):
    """One full 30-step run (float32 export), shared by the tests that inspect its results."""
    root, model = workspace
    out = root / "full"
    result = train_eagle3(model, root / "data", out, CFG, export_dtype="float32", progress=False)
    return out, result


# ---- TTT vs inference ------------------------------------------------------------------------------------------------

def _random_drafter(seed: int = 0):
    """Drafter with O(1) activations (the default 0.02 init makes attention nearly uniform, a weak test)."""
    cfg = Eagle3Config.for_target(TARGET, draft_vocab_size=48)
    graphdef, state = nnx.split(Eagle3Drafter(cfg, dtype=jnp.float32, rngs=nnx.Rngs(seed)))
    state = jax.tree.map(lambda x: x / 0.02 / np.sqrt(x.shape[1]) if x.ndim == 2 and x.dtype == jnp.float32 else x,
                         state)
    return graphdef, state


@nnx.jit
def _infer(drafter, *args):
    return drafter(*args)


def test_ttt_steps_equal_inference_chains():
    """Step 0 = feeding the pairs causally; step i at t = the depth-i chain node rooted at pair t (the window layout
    and positions of jspec.methods.eagle3), fed its parent's hidden output."""
    graphdef, state = _random_drafter()
    rng = np.random.default_rng(0)
    b, t, steps = 2, 12, 4
    embed = jnp.asarray(rng.normal(size=(VOCAB, 32)), jnp.float32)
    tokens = jnp.asarray(rng.integers(0, VOCAB, (b, t)), jnp.int32)
    features = jnp.asarray(rng.normal(size=(b, t, 96)), jnp.float32)
    positions = jnp.broadcast_to(jnp.arange(t), (b, t))
    hidden, logits = jax.jit(lambda s: ttt_forward(nnx.merge(graphdef, s), embed, tokens, features, positions,
                                                   jnp.ones((b, t), jnp.int32), steps))(state)

    drafter = nnx.merge(graphdef, state)
    h0, l0, cache = _infer(drafter, embed, shift_left(tokens, 1), features, positions,
                           drafter.init_cache(b, t, jnp.float32),
                           causal_block_mask(jnp.zeros(b, jnp.int32), jnp.ones((b, t), bool)))
    np.testing.assert_allclose(logits[0], l0, atol=1e-5, rtol=0)
    np.testing.assert_allclose(hidden[0], h0, atol=1e-5, rtol=0)
    for root in (0, 5, t - steps - 1):
        h, node_cache = h0[:, root : root + 1], cache
        for depth in range(1, steps):
            # Window slot 0 is the root pair; the chain's nodes follow it, each seeing the root and its ancestors.
            mask = BlockMask(start=jnp.full((b,), root, jnp.int32), block=jnp.ones((b, 1, depth + 1), bool),
                             offset=depth)
            h, lg, node_cache = _infer(drafter, embed, tokens[:, root + depth + 1 : root + depth + 2], h,
                                       jnp.full((b, 1), root + depth), node_cache, mask)
            np.testing.assert_allclose(logits[depth][:, root], lg[:, 0], atol=1e-5, rtol=0)
            np.testing.assert_allclose(hidden[depth][:, root], h[:, 0], atol=1e-5, rtol=0)


def test_packed_records_do_not_see_each_other():
    graphdef, state = _random_drafter(1)
    rng = np.random.default_rng(1)
    embed = jnp.asarray(rng.normal(size=(VOCAB, 32)), jnp.float32)
    records = [(rng.integers(0, VOCAB, n).astype(np.int32), np.ones(n, bool)) for n in (7, 9)]
    run = jax.jit(lambda s, p: ttt_forward(nnx.merge(graphdef, s), embed, p["tokens"], p["features"], p["positions"],
                                           p["segments"], 3)[1])
    together = pack(records, 16)
    assert len(together) == 1 and together.segments[0].tolist() == [1] * 7 + [2] * 9
    features = rng.normal(size=(1, 16, 96)).astype(np.float32)
    packed = run(state, {**together.rows(np.arange(1)), "features": features})
    for seg, (start, n) in enumerate([(0, 7), (7, 9)]):
        alone = pack([records[seg]], 16)
        alone_features = np.zeros_like(features)
        alone_features[:, :n] = features[:, start : start + n]
        single = run(state, {**alone.rows(np.arange(1)), "features": alone_features})
        for i in range(3):
            valid = n - i - 1  # positions whose step-i input token is still in the record
            np.testing.assert_allclose(packed[i][0, start : start + valid], single[i][0, :valid], atol=1e-5, rtol=0)


def test_batcher_resumes_mid_epoch():
    records = [(np.arange(n, dtype=np.int32), np.ones(n, bool)) for n in range(3, 20)]
    straight = Batcher(records, 24, 3, seed=5)
    batches = [straight.next() for _ in range(9)]  # crosses epoch boundaries
    assert straight.epoch >= 1
    resumed = Batcher(records, 24, 3, seed=5)
    for _ in range(4):
        resumed.next()
    again = Batcher(records, 24, 3, seed=5, **resumed.position)
    for want in batches[4:]:
        got = again.next()
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("schedule, quarter", [("cosine", 0.5 * (1 + np.cos(np.pi / 4))), ("linear", 0.75)])
def test_learning_rate_warms_up_then_decays_to_zero(schedule, quarter):
    cfg = Eagle3TrainConfig(steps=110, lr=1e-3, warmup_steps=10, schedule=schedule)
    lrs = np.asarray(jax.vmap(learning_rate(cfg))(jnp.arange(111)))
    np.testing.assert_allclose(lrs[[0, 5, 10, 35, 110]], [0, 5e-4, 1e-3, 1e-3 * quarter, 0], rtol=1e-5, atol=1e-9)
    assert np.all(np.diff(lrs[:11]) > 0) and np.all(np.diff(lrs[10:]) < 0)


# ---- training ------------------------------------------------------------------------------------------------------

def test_loss_falls_and_accuracy_rises(trained):
    out, result = trained
    assert result["finished"] and result["step"] == 30
    train = [r for r in run_metrics(out) if r["split"] == "train"]
    evals = [r for r in run_metrics(out) if r["split"] == "eval"]
    assert [r["step"] for r in train] == [5, 10, 15, 20, 25, 30] and [r["step"] for r in evals] == [10, 20, 30]
    assert train[-1]["loss"] < 0.7 * train[0]["loss"], [r["loss"] for r in train]
    assert evals[-1]["loss"] < evals[0]["loss"]
    assert evals[-1]["acc"][0] > evals[0]["acc"][0] and len(evals[-1]["acc"]) == CFG.ttt_steps
    assert (out / "training.png").stat().st_size > 10_000


def test_resume_is_bit_identical(workspace, trained):
    root, model = workspace
    out = root / "halves"
    first = train_eagle3(model, root / "data", out, CFG, export_dtype="float32", stop_at=15, progress=False)
    assert first["step"] == 15 and not first["finished"] and not (out / "drafter").exists()
    with pytest.raises(UserError, match="--resume"):
        train_eagle3(model, root / "data", out, CFG, progress=False)
    second = train_eagle3(model, root / "data", out, CFG, export_dtype="float32", resume=True, progress=False)
    assert second["finished"]
    full, _ = trained
    assert_same_run(full, out)


def test_time_limit_checkpoints_and_stops(workspace):
    root, model = workspace
    out = root / "timed"
    result = train_eagle3(model, root / "data", out, CFG, time_limit=1e-9, progress=False)
    assert result == {"step": 1, "finished": False, "eval": None}
    assert (out / "checkpoints" / "1").is_dir() and not (out / "drafter").exists()


def test_resume_refuses_other_settings(workspace, trained):
    root, model = workspace
    out, _ = trained
    with pytest.raises(UserError, match="other settings.*--lr"):
        train_eagle3(model, root / "data", out, Eagle3TrainConfig(**{**CFG.__dict__, "lr": 1e-3}), resume=True,
                     progress=False)


def test_damaged_checkpoint_is_a_user_error(workspace):
    root, model = workspace
    out = root / "damaged"
    train_eagle3(model, root / "data", out, CFG, stop_at=2, progress=False)
    step_dir = truncate_checkpoint_arrays(out, 2)
    with pytest.raises(UserError, match=f"{step_dir}: corrupt or incomplete checkpoint"):
        train_eagle3(model, root / "data", out, CFG, resume=True, progress=False)
    with pytest.raises(UserError, match=f"{step_dir}: corrupt or incomplete checkpoint"):
        export_latest(model, out)


def test_export_loads_and_drafts_losslessly(workspace, trained):
    root, model = workspace
    out, result = trained
    drafter = load_eagle3_checkpoint(out / "drafter", model.cfg, "float32")
    assert drafter.cfg == drafter_config(model.cfg, CFG)
    assert result["size_bytes"] == (out / "drafter" / "model.safetensors").stat().st_size
    # --export from the last checkpoint writes the same weights as the end of training.
    before = drafter_tensors(out)
    assert export_latest(model, out, "float32")[0] == 30
    for name, value in drafter_tensors(out).items():
        np.testing.assert_array_equal(value, before[name])

    method, params = build("eagle3", model, drafter=str(out / "drafter"), top_k=2, depth=3, budget=8)
    rng = np.random.default_rng(7)
    prompts = [rng.integers(0, VOCAB, 9).tolist(), rng.integers(0, VOCAB, 5).tolist()]
    kw = dict(max_new_tokens=24, max_cache_len=96)
    vanilla = generate(model.graphdef, model.params, prompts, **kw).tokens
    spec = speculative_generate(model.graphdef, model.params, prompts, method=method, method_params=params, **kw)
    assert spec.tokens == vanilla
    # The trained drafter is useful: more than one token per target step on the data's own distribution.
    steps = sum(len(a) for a in spec.accepted)
    assert sum(map(len, spec.tokens)) / steps > 1.15  # an untrained drafter: 1.04


def test_smollm2_drafter_with_default_settings_fits_20_mb():
    smollm2 = ModelConfig(family="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536, num_layers=30,
                          num_heads=9, num_kv_heads=3, head_dim=64, rms_norm_eps=1e-5, rope=RopeConfig(theta=1e5),
                          tie_embeddings=True)
    cfg = drafter_config(smollm2, Eagle3TrainConfig())
    drafter = nnx.eval_shape(lambda: Eagle3Drafter(cfg, dtype=jnp.bfloat16, rngs=nnx.Rngs(0)))
    weights = sum(x.size * 2 for x in jax.tree.leaves(nnx.state(drafter, nnx.Param)))
    vocab_maps = cfg.draft_vocab_size * 8 + cfg.vocab_size  # d2t int64, t2d bool
    assert 19e6 < weights + vocab_maps < 20e6


# ---- CLI -----------------------------------------------------------------------------------------------------------

def _cli(workspace, out, *extra):
    root, _ = workspace
    # CFG's shapes, so the compiled train step is reused (only --steps differs, and it is not a compile-time input).
    return ["train", "eagle3", "--model", str(root / "model"), "--data", str(root / "data"), "--out", str(out),
            "--steps", "4", "--batch-size", "4", "--seq-len", "64", "--ttt-steps", "3", "--draft-vocab-size", "48",
            "--intermediate-size", "48", "--eval-records", "8", "--eval-every", "2", "--warmup-steps", "1", *extra]


def test_cli_trains_and_exports(workspace, tmp_path, capsys):
    assert main(_cli(workspace, tmp_path / "run")) == 0
    err = capsys.readouterr().err
    assert "step 2/4  eval loss" in err and "exported EAGLE-3 drafter" in err
    cfg = json.loads((tmp_path / "run" / "drafter" / "config.json").read_text())
    assert cfg["draft_vocab_size"] == 48 and cfg["intermediate_size"] == 48
    assert json.loads((tmp_path / "run" / "run.json").read_text())["train_only_data"] is None
    weights = safetensors.numpy.load_file(str(tmp_path / "run" / "drafter" / "model.safetensors"))
    assert weights["lm_head.weight"].dtype == ml_dtypes.bfloat16  # the default export dtype
    assert main(_cli(workspace, tmp_path / "run", "--export", "--dtype", "float32")) == 0
    weights = safetensors.numpy.load_file(str(tmp_path / "run" / "drafter" / "model.safetensors"))
    assert weights["lm_head.weight"].dtype == np.float32


def test_several_data_folders_read_as_one(workspace):
    root, _ = workspace
    one = load_records(root / "data", VOCAB, 64)
    two = load_records([root / "data", root / "data"], VOCAB, 64)
    assert len(two) == 2 * len(one)
    for (t1, m1), (t2, m2) in zip(one + one, two):
        np.testing.assert_array_equal(t1, t2)
        np.testing.assert_array_equal(m1, m2)
    assert common.data_setting([root / "data", root / "data"]) == [str((root / "data").absolute())] * 2
    assert common.data_setting(root / "data") == str((root / "data").absolute())


def test_draft_vocab_is_capped_at_the_target_vocabulary():
    assert drafter_config(TARGET, Eagle3TrainConfig(draft_vocab_size=1000)).draft_vocab_size == VOCAB
    assert drafter_config(TARGET, Eagle3TrainConfig()).intermediate_size == TARGET.intermediate_size


@pytest.mark.parametrize("change, message", [
    (lambda root, out: ["--data", str(root / "nowhere")], "no such folder"),
    (lambda root, out: ["--data", str(root / "empty")], "holds no records"),
    (lambda root, out: ["--data", str(root / "other_vocab")], "vocabulary of 100 tokens.*has 64"),
    (lambda root, out: ["--data", f"{root / 'data'},{root / 'nowhere'}"], "nowhere: no such folder"),
    (lambda root, out: ["--data", f"{root / 'data'},{root / 'other_vocab'}"], "other_vocab was made by a model"),
    (lambda root, out: ["--data", ","], "--data: names no folder"),
    (lambda root, out: ["--train-only-data", str(root / "nowhere")], "nowhere: no such folder"),
    (lambda root, out: ["--train-only-data", str(root / "other_vocab")], "other_vocab was made by a model"),
    (lambda root, out: ["--seq-len", "3"], "--seq-len 3 is too short"),
    (lambda root, out: ["--warmup-steps", "4"], "--warmup-steps"),
    (lambda root, out: ["--dtype", "float16"], "invalid choice"),
])
def test_cli_errors(workspace, tmp_path, capsys, change, message):
    root, _ = workspace
    for name, vocab in (("empty", VOCAB), ("other_vocab", 100)):
        if not (root / name).exists():
            (root / name).mkdir()
            (root / name / "manifest.json").write_text(json.dumps({"format": FORMAT, "vocab_size": vocab,
                                                                   "shards": 0}))
    (root / "other_vocab" / "manifest.json").write_text(json.dumps({"format": FORMAT, "vocab_size": 100,
                                                                    "shards": 1}))
    if not (root / "other_vocab" / "shard-00000.npz").exists():
        _write_shard(root / "other_vocab" / "shard-00000.npz", [("a", [1, 2, 3], [4, 5, 6])])
    assert main(_cli(workspace, tmp_path / "out", *change(root, tmp_path))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jspec: error:"), err
    assert re.search(message, err[0]), err[0]
