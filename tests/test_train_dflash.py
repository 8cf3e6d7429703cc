"""`jspec train dflash` / `jspec train domino` on a tiny random target: the training forward equals the inference
path, the curriculum schedule, the loss falls, resumption is bit for bit, damaged checkpoints are user errors, and
exports drive the dflash / domino / graft_tail methods losslessly."""

import dataclasses
import json
import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from flax import nnx

from jspec.cli import main
from jspec.config import ModelConfig, RopeConfig
from jspec.decode import generate
from jspec.drafters.dflash import DFlashConfig, DFlashDrafter
from jspec.drafters.domino import DominoConfig, DominoDrafter
from jspec.errors import UserError
from jspec.io.dflash_checkpoint import load_dflash_checkpoint
from jspec.methods import build, dflash_method
from jspec.methods.base import Context
from jspec.models.decoder import Decoder
from jspec.models.loading import LoadedModel
from jspec.spec_decode import speculative_generate
from jspec.train import common
from jspec.train import blocks as block_objective
from jspec.train import dflash as dflash_train
from jspec.train.blocks import (Blocks, block_hidden, block_labels, block_loss, draft_logits, reach_weights,
                                sample_blocks, teacher_positions, teacher_probs)
from jspec.train.dflash import export_latest, train_dflash
from jspec.train.dflash_config import DFlashTrainConfig, curriculum, drafter_config
from jspec.train.drafter_init import init_drafter
from jspec.train.packing import Batcher, pack, pad_rows

from checkpoints import assert_same_run, drafter_tensors, run_metrics, truncate_checkpoint_arrays
import tiny_checkpoint
from tiny_checkpoint import VOCAB

# Shared by the API tests so each variant's jitted train step compiles once.
CFG = DFlashTrainConfig(steps=30, batch_size=4, seq_len=64, lr=1e-2, warmup_steps=3, block_size=4, num_layers=2,
                        anchors_per_seq=16, gamma_decay=4.0, intermediate_size=48, eval_records=8, eval_every=10,
                        save_every=100, log_every=5)
DOMINO = dataclasses.replace(CFG, domino=True, gru_hidden=16, rank=16)


# ---- the training forward against the inference path ---------------------------------------------------------------

QWEN = ModelConfig(family="qwen3", vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=8, num_heads=4,
                   num_kv_heads=2, head_dim=8, rms_norm_eps=1e-6, rope=RopeConfig(theta=10000.0), qk_norm=True)


def _o1(module):
    """O(1) activations (the default 0.02 init makes attention nearly uniform, a weak test)."""
    graphdef, state = nnx.split(module)
    return nnx.merge(graphdef, jax.tree.map(lambda x: x / 0.02 / np.sqrt(x.shape[-1]) if x.ndim == 2 else x, state))


@pytest.fixture(scope="module")
def qwen():
    graphdef, params = nnx.split(_o1(Decoder(QWEN, dtype=jnp.float32, rngs=nnx.Rngs(3))))
    return LoadedModel(name="tiny-qwen", cfg=QWEN, graphdef=graphdef, params=params, tokenizer=None, dtype="float32",
                       chat=False)


def _inference_drafts(method, params, features, record, offset):
    """The method's proposal for a block rooted at record[offset], its context = the record's features before."""
    state = method.init_state(params, 1, 64)
    state = method.prefill(params, state, jnp.asarray(record[None, :offset]), jnp.asarray([offset]),
                           jnp.asarray(record[offset : offset + 1]), features[None, :offset])
    ctx = Context(root=jnp.asarray(record[offset : offset + 1]), history=jnp.zeros((1, 64), jnp.int32),
                  history_len=jnp.asarray([offset + 1]), lengths=jnp.asarray([offset]))
    tree, _ = jax.jit(method.propose)(params, state, ctx)
    return np.asarray(tree.tokens[0, 1:])


@pytest.mark.parametrize("kind", ["dflash", "domino"])
def test_training_blocks_equal_inference_blocks(qwen, kind):
    """Two records packed in one row, anchors in both (one at the second record's start, whose context is empty):
    every block's states and base logits equal `DFlashDrafter.__call__` over a cache holding its record's features
    before the anchor, to 1e-5 in float32; the blocks' greedy drafts (domino: its GRU reading its own drafts, i.e.
    the `ttt` forward) equal the dflash / domino methods' proposals."""
    backbone_cfg = DFlashConfig.for_target(QWEN, num_layers=2, block_size=5, mask_token_id=90,
                                           shift_label=kind == "domino")
    if kind == "domino":
        model = _o1(DominoDrafter(DominoConfig(backbone_cfg, gru_hidden=16, rank=8), dtype=jnp.float32,
                                  rngs=nnx.Rngs(0)))
        backbone = model.backbone
    else:
        model = backbone = _o1(DFlashDrafter(backbone_cfg, dtype=jnp.float32, rngs=nnx.Rngs(0)))
    # Training scores every row of a shift_label block; inference drafts all of them with full_block.
    method, params = dflash_method(kind, qwen, model, full_block=True)
    embed, lm_head = params["embed"], params["lm_head"]
    rng = np.random.default_rng(0)
    records = [(rng.integers(0, 90, n).astype(np.int32), np.ones(n, bool)) for n in (9, 13)]
    packed = pack(records, 24)
    batch = {k: jnp.asarray(v) for k, v in packed.rows(np.arange(1)).items()}
    features = jnp.asarray(rng.normal(size=(1, 24, backbone_cfg.feature_size)), jnp.float32)
    anchors = jnp.asarray([[0, 3, 8, 9, 10, 16, 21]], jnp.int32)
    blocks = block_labels(batch, anchors, jnp.ones(anchors.shape, bool), backbone_cfg.num_drafts)

    @jax.jit
    def train_side(model):
        hidden = block_hidden(model.backbone if kind == "domino" else model, embed, batch, features, anchors)
        first, j = backbone_cfg.first_draft_row, backbone_cfg.num_drafts
        rows = hidden[0, :, first : first + j]
        return hidden[0], draft_logits(model, embed, lm_head, rows, blocks.prev[0], ttt=True)

    hidden, (final, base) = train_side(model)
    for n, a in enumerate(np.asarray(anchors[0]).tolist()):
        start = 0 if a < 9 else 9
        record, offset = records[int(a >= 9)][0], a - start
        cache = backbone.write_context(features[:, start : a], jnp.arange(offset)[None], jnp.ones((1, offset), bool),
                                       backbone.init_cache(1, 32, jnp.float32))
        block = jnp.asarray([[record[offset]] + [90] * 4])
        want, _ = backbone(embed, block, jnp.asarray([offset]), cache)
        np.testing.assert_allclose(hidden[n], want[0], atol=1e-5, rtol=0)
        first = backbone_cfg.first_draft_row
        want_base = want[0, first : first + backbone_cfg.num_drafts] @ lm_head.T
        np.testing.assert_allclose(base[n], want_base, atol=1e-5, rtol=0)
        drafts = _inference_drafts(method, params, features[0, start:], record, offset)
        np.testing.assert_array_equal(np.argmax(final[n], axis=-1), drafts)
    if kind == "domino":  # the correction changes the drafts (else the comparison above would not test the head)
        assert np.any(np.argmax(final, -1) != np.argmax(base, -1))


def test_anchors_are_distinct_answer_positions_with_an_answer_successor():
    mask = np.zeros((2, 24), bool)
    mask[0, 3:10] = mask[0, 14:20] = True  # two records' answers (segments below)
    mask[1, 5:8] = True
    segments = np.array([[1] * 12 + [2] * 12, [1] * 10 + [0] * 14])
    batch = {"tokens": jnp.asarray(np.arange(48).reshape(2, 24) % 7, jnp.int32), "loss_mask": jnp.asarray(mask),
             "segments": jnp.asarray(segments, jnp.int32), "positions": jnp.zeros((2, 24), jnp.int32)}
    candidates = {0: set(range(3, 9)) | set(range(14, 19)), 1: {5, 6}}
    for seed in range(5):
        blocks = sample_blocks(jax.random.key(seed), batch, 8, 3)
        anchors, keep = np.asarray(blocks.anchors), np.asarray(blocks.keep)
        assert keep[0].all() and keep[1].tolist() == [True, True] + [False] * 6
        for row in range(2):
            kept = anchors[row][keep[row]].tolist()
            assert len(set(kept)) == len(kept) and set(kept) <= candidates[row]
        # Labels: the next three tokens, scored while they stay answer tokens of the anchor's record.
        a = int(anchors[0, 0])
        assert blocks.labels[0, 0].tolist() == [(a + j) % 7 for j in (1, 2, 3)]
        assert blocks.valid[0, 0].tolist() == [bool(mask[0, a + j]) and (a + j < 12) == (a < 12) for j in (1, 2, 3)]
    assert set(np.asarray(sample_blocks(jax.random.key(0), batch, 11, 3).anchors[0]).tolist()) == candidates[0]


@pytest.mark.parametrize("kind, reach, soft", [("dflash", False, False), ("domino", False, False),
                                               ("dflash", True, False), ("domino", True, False),
                                               ("dflash", False, True), ("domino", False, True)])
def test_chunked_block_loss_and_gradient_equal_the_whole_batch_formula(monkeypatch, kind, reach, soft):
    """`block_loss` (Domino's GRU run once outside the loss chunks, logits rematerialised per chunk of blocks) has the
    value and gradient of (1 − λ)·Σ w·CE(final) / Σ w + λ·Σ w·CE(base) / Σ w over all blocks at once, in float32;
    w is the position decay, or with `reach` each logits' product of its earlier drafts' label probabilities (held
    fixed: no gradient flows through w). With `soft` the CE is against the target's distribution at the position
    a + j − 1 of each block's anchor a (anchors spread over rows of 12 positions, the last blocks clipped)."""
    monkeypatch.setattr(block_objective, "LOGITS_PER_CHUNK", 2 * 3 * QWEN.vocab_size)  # 2 blocks a chunk: 3 chunks
    backbone_cfg = DFlashConfig.for_target(QWEN, num_layers=1, block_size=4, mask_token_id=90,
                                           shift_label=kind == "domino")
    model = (_o1(DominoDrafter(DominoConfig(backbone_cfg, gru_hidden=16, rank=8), dtype=jnp.float32,
                               rngs=nnx.Rngs(0))) if kind == "domino"
             else _o1(DFlashDrafter(backbone_cfg, dtype=jnp.float32, rngs=nnx.Rngs(0))))
    rng = np.random.default_rng(1)
    embed = jnp.asarray(rng.normal(size=(QWEN.vocab_size, QWEN.hidden_size)), jnp.float32)
    lm_head = jnp.asarray(rng.normal(size=(QWEN.vocab_size, QWEN.hidden_size)) / 4, jnp.float32)
    j = backbone_cfg.num_drafts
    hidden = jnp.asarray(rng.normal(size=(2, 3, 4, QWEN.hidden_size)), jnp.float32)
    tokens = jnp.asarray(rng.integers(0, 90, (2, 3, j + 1)), jnp.int32)
    valid = jnp.asarray(rng.random((2, 3, j)) < 0.8)
    anchors = jnp.asarray([[0, 5, 10], [3, 9, 11]], jnp.int32)
    blocks = Blocks(anchors=anchors, keep=jnp.ones((2, 3), bool), labels=tokens[..., 1:], prev=tokens[..., :-1],
                    valid=valid)
    final_hidden = jnp.asarray(rng.normal(size=(2, 12, QWEN.hidden_size)), jnp.float32)
    teacher = teacher_probs(final_hidden, lm_head) if soft else None
    lam, gamma = jnp.float32(0.3), 4.0
    graphdef, weights = nnx.split(model)

    def chunked(weights, hidden):
        return block_loss(nnx.merge(graphdef, weights), embed, lm_head, hidden, blocks, lam, gamma, False, reach,
                          teacher)[0]

    def whole(weights, hidden):
        first = backbone_cfg.first_draft_row
        rows = hidden[:, :, first : first + j].reshape(6, j, -1)
        final, base = draft_logits(nnx.merge(graphdef, weights), embed, lm_head, rows,
                                   blocks.prev.reshape(6, j), ttt=False)
        labels, scored = blocks.labels.reshape(6, j, 1), valid.reshape(6, j)
        if soft:
            at = np.minimum(np.asarray(anchors)[:, :, None] + np.arange(j), 11)  # a .. a + j − 1, within the row
            p = jax.nn.softmax(final_hidden[np.arange(2)[:, None, None], at] @ lm_head.T, axis=-1).reshape(6, j, -1)
            ce = [-jnp.sum(p * jax.nn.log_softmax(x, -1), -1) for x in (final, base)]
        else:
            ce = [jax.nn.logsumexp(x, -1) - jnp.take_along_axis(x, labels, -1)[..., 0] for x in (final, base)]
        if not reach:
            w = jnp.where(scored, jnp.exp(-jnp.arange(j) / gamma), 0.0)
            return ((1 - lam) * jnp.sum(w * ce[0]) + lam * jnp.sum(w * ce[1])) / jnp.sum(w)
        loss = 0.0
        for share, c in ((1 - lam, ce[0]), (lam, ce[1])):
            p = jax.lax.stop_gradient(jnp.where(scored, jnp.exp(-c), 0.0))
            w = jnp.stack([jnp.prod(p[:, :k], axis=1) for k in range(j)], axis=1) * scored
            loss = loss + share * jnp.sum(w * c) / jnp.sum(w)
        return loss

    got, got_grad = jax.jit(jax.value_and_grad(chunked, argnums=(0, 1)))(weights, hidden)
    want, want_grad = jax.jit(jax.value_and_grad(whole, argnums=(0, 1)))(weights, hidden)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for g, r in zip(jax.tree.leaves(got_grad), jax.tree.leaves(want_grad)):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-6)


def test_reach_weights_are_the_probability_that_the_earlier_drafts_are_right():
    ce = -np.log(np.array([[0.5, 0.4, 0.9, 0.2], [0.8, 0.5, 0.5, 0.5]], np.float32))
    valid = np.array([[True, True, True, True], [True, False, True, True]])
    got = reach_weights(jnp.asarray(ce), jnp.asarray(valid))
    # Row 2's second draft is unscored: nothing after it can be reached (its own weight is still 0.8; the loss
    # masks unscored drafts).
    np.testing.assert_allclose(got, [[1.0, 0.5, 0.2, 0.18], [1.0, 0.8, 0.0, 0.0]], rtol=1e-6)
    assert jax.grad(lambda c: reach_weights(c, jnp.asarray(valid)).sum())(jnp.asarray(ce)).any() == 0


def test_curriculum_moves_the_base_share_from_one_to_zero():
    cfg = dataclasses.replace(DOMINO, steps=10, curriculum_fraction=0.5)
    np.testing.assert_allclose(curriculum(cfg), [1.0, 0.8, 0.6, 0.4, 0.2, 0, 0, 0, 0, 0], atol=1e-7)
    np.testing.assert_allclose(curriculum(dataclasses.replace(cfg, curriculum_fraction=1.0)),
                               1 - np.arange(10) / 10, atol=1e-7)
    assert not curriculum(dataclasses.replace(cfg, curriculum=False)).any()
    # A continued head starts lower (SpecForge's lambda_base_start) and still reaches 0 at the same step.
    np.testing.assert_allclose(curriculum(dataclasses.replace(cfg, curriculum_start=0.5)),
                               [0.5, 0.4, 0.3, 0.2, 0.1, 0, 0, 0, 0, 0], atol=1e-7)
    assert not curriculum(dataclasses.replace(cfg, curriculum_start=0.0)).any()
    # A floor keeps some base loss to the end: linear from start to end over the same steps, then flat.
    np.testing.assert_allclose(curriculum(dataclasses.replace(cfg, curriculum_end=0.5)),
                               [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.5, 0.5, 0.5, 0.5], atol=1e-7)
    np.testing.assert_allclose(curriculum(dataclasses.replace(cfg, curriculum_start=0.4, curriculum_end=0.4)), 0.4)
    assert not curriculum(dataclasses.replace(CFG, steps=10)).any()  # DFlash has no head: final = base logits


# ---- training ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return tiny_checkpoint.workspace(tmp_path_factory.mktemp("train_dflash"))


@pytest.fixture(scope="module")
def trained(workspace):
    """One full run per kind (float32 export), shared by the tests that inspect them."""
    root, model = workspace
    out = {}
    for kind, cfg in (("dflash", CFG), ("domino", DOMINO)):
        result = train_dflash(model, root / "data", root / kind, cfg, export_dtype="float32", progress=False)
        out[kind] = (root / kind, result)
    return out


@pytest.mark.parametrize("kind", ["dflash", "domino"])
def test_loss_falls_and_acceptance_rises(trained, kind):
    out, result = trained[kind]
    assert result["finished"] and result["step"] == 30
    train = [r for r in run_metrics(out) if r["split"] == "train"]
    evals = [r for r in run_metrics(out) if r["split"] == "eval"]
    assert [r["step"] for r in train] == [5, 10, 15, 20, 25, 30] and [r["step"] for r in evals] == [10, 20, 30]
    assert train[-1]["loss"] < 0.8 * train[0]["loss"], [r["loss"] for r in train]
    assert evals[-1]["loss"] < evals[0]["loss"] and evals[-1]["accept_len"] > evals[0]["accept_len"]
    assert len(evals[-1]["acc"]) == (4 if kind == "domino" else 3)  # drafts per block
    if kind == "domino":
        assert [r["lambda"] for r in train] == pytest.approx([1 - (s - 1) / 30 for s in (5, 10, 15, 20, 25, 30)])
        assert {"base_loss", "base_acc", "base_accept_len"} <= set(evals[-1])
    assert (out / "training.png").stat().st_size > 10_000


def test_target_distributions_sit_where_they_predict_the_labels(workspace):
    """Soft labels (`--labels target`): `teacher_probs` are the target's next-token distributions over the rows and
    `teacher_positions` picks a .. a + J − 1, whose distributions predict the block's labels x_{a+1} .. x_{a+J}. On
    the target's own greedy answers their argmax is the label at every scored draft (float32 near-ties aside)."""
    root, model = workspace
    packed = pack(dflash_train.load_records(root / "data", VOCAB, 64), 64)
    batch = jax.tree.map(jnp.asarray, packed.rows(np.arange(4)))
    _, final_hidden = common.target_outputs(model.graphdef, model.params, batch, (1,), logits=False,
                                            final_hidden=True)
    blocks = sample_blocks(jax.random.key(0), batch, 16, 5)
    target = nnx.merge(model.graphdef, model.params)
    probs = np.asarray(teacher_probs(final_hidden, (target.embed if target.lm_head is None else target.lm_head)[...]))
    np.testing.assert_allclose(probs, np.asarray(jax.nn.softmax(target.logits(final_hidden), axis=-1)), atol=1e-6)
    positions = np.asarray(teacher_positions(blocks.anchors, 5, 64))
    picked = probs[np.arange(4)[:, None, None], positions]  # [R, N, J, V]
    top2 = np.sort(picked, axis=-1)[..., -2:]
    checked = np.asarray(blocks.valid) & (top2[..., 1] - top2[..., 0] > 1e-4)
    assert checked.sum() > 100
    np.testing.assert_array_equal(np.argmax(picked, axis=-1)[checked], np.asarray(blocks.labels)[checked])


@pytest.mark.parametrize("base", [CFG, DOMINO], ids=["dflash", "domino"])
def test_soft_label_run_trains_and_records_its_labels(workspace, base):
    """Both drafters train on the target's distributions (the steps-fair fork gives every run soft labels)."""
    root, model = workspace
    out = root / f"soft_{base.domino}"
    result = train_dflash(model, root / "data", out, dataclasses.replace(base, labels="target"),
                          export_dtype="float32", progress=False)
    assert result["finished"]
    assert json.loads((out / "run.json").read_text())["config"]["labels"] == "target"
    train = [r for r in run_metrics(out) if r["split"] == "train"]
    evals = [r for r in run_metrics(out) if r["split"] == "eval"]
    assert train[-1]["loss"] < 0.8 * train[0]["loss"], [r["loss"] for r in train]
    assert evals[-1]["accept_len"] > evals[0]["accept_len"]
    with pytest.raises(UserError, match="--position-weights reach .* --labels data"):
        dataclasses.replace(CFG, labels="target", position_weights="reach")
    with pytest.raises(UserError, match="--labels must be one of data, target"):
        dataclasses.replace(CFG, labels="teacher")


def test_resume_is_bit_identical(workspace, trained):
    root, model = workspace
    out = root / "halves"
    first = train_dflash(model, root / "data", out, DOMINO, export_dtype="float32", stop_at=15, progress=False)
    assert first["step"] == 15 and not first["finished"] and not (out / "drafter").exists()
    with pytest.raises(UserError, match="--resume"):
        train_dflash(model, root / "data", out, DOMINO, progress=False)
    with pytest.raises(UserError, match="other settings.*--curriculum-fraction"):
        train_dflash(model, root / "data", out, dataclasses.replace(DOMINO, curriculum_fraction=0.9), resume=True,
                     progress=False)
    second = train_dflash(model, root / "data", out, DOMINO, export_dtype="float32", resume=True, progress=False)
    assert second["finished"]
    full, _ = trained["domino"]
    assert "prefix_gru.weight_ih_l0" in assert_same_run(full, out)


def test_damaged_checkpoint_is_a_user_error(workspace, trained):
    root, model = workspace
    out = root / "damaged"
    train_dflash(model, root / "data", out, CFG, stop_at=2, progress=False)
    step_dir = truncate_checkpoint_arrays(out, 2)
    with pytest.raises(UserError, match=f"{step_dir}: corrupt or incomplete checkpoint"):
        train_dflash(model, root / "data", out, CFG, resume=True, progress=False)
    with pytest.raises(UserError, match=f"{step_dir}: corrupt or incomplete checkpoint"):
        export_latest(model, out)


def test_exports_load_and_draft_losslessly(workspace, trained):
    root, model = workspace
    rng = np.random.default_rng(7)
    prompts = [rng.integers(0, VOCAB, 9).tolist(), rng.integers(0, VOCAB, 5).tolist()]
    kw = dict(max_new_tokens=24, max_cache_len=96)
    vanilla = generate(model.graphdef, model.params, prompts, **kw).tokens
    mats = {}
    for kind, name in (("dflash", "dflash"), ("domino", "domino"), ("dflash", "graft_tail"), ("domino", "dflash")):
        out, result = trained[kind]
        drafter = load_dflash_checkpoint(out / "drafter", model.cfg)
        assert drafter.cfg == drafter_config(model.cfg, DOMINO if kind == "domino" else CFG)
        assert result["size_bytes"] == (out / "drafter" / "model.safetensors").stat().st_size
        method, params = build(name, model, drafter=str(out / "drafter"))
        spec = speculative_generate(model.graphdef, model.params, prompts, method=method, method_params=params, **kw)
        assert spec.tokens == vanilla, (kind, name)
        mats[kind, name] = sum(map(len, spec.tokens)) / sum(len(a) for a in spec.accepted)
    # The trained Domino drafter is useful on the data's own distribution (an untrained one: about 1.0) and its head
    # beats its backbone alone; retrieval lifts the (here barely trained) DFlash drafter.
    assert mats["domino", "domino"] > 1.2 and mats["domino", "domino"] >= mats["domino", "dflash"], mats
    assert mats["dflash", "graft_tail"] > mats["dflash", "dflash"], mats
    # --export from the last checkpoint writes the same weights as the end of training.
    out, _ = trained["domino"]
    before = drafter_tensors(out)
    assert export_latest(model, out, "float32", command="domino")[0] == 30
    for name, value in drafter_tensors(out).items():
        np.testing.assert_array_equal(value, before[name])


@pytest.mark.parametrize("kind", ["dflash", "domino"])
def test_walk_replays_the_decode_loop_over_the_held_out_answers(workspace, trained, kind):
    """`walk_evaluate` in float32 is greedy speculative decoding from the held-out prompts with the exported
    drafter: the held-out answers are the target's greedy tokens, and tokens over target forwards is its MAT (for
    Domino's base logits, that of the backbone alone). The run closes with that record (in its bfloat16 compute)."""
    root, model = workspace
    out, result = trained[kind]
    cfg = DOMINO if kind == "domino" else CFG
    [walk] = [r for r in run_metrics(out) if r["split"] == "walk"]
    assert walk == {"step": 30, "split": "walk", **result["walk"]}
    _, held_out = common.split_records(dflash_train.load_records(root / "data", VOCAB, cfg.seq_len),
                                       cfg.eval_records, cfg.seed)
    drafter = load_dflash_checkpoint(out / "drafter", model.cfg, "float32")
    graphdef, params = nnx.split(drafter)
    backbone = drafter.backbone if kind == "domino" else drafter
    objective = dflash_train.Objective(taps=backbone.cfg.tap_layers, anchors=cfg.anchors_per_seq,
                                       gamma=cfg.gamma_decay, ttt=False, seed=cfg.seed, compute_dtype="float32")
    rows, statics = pad_rows(pack(held_out, cfg.seq_len), cfg.batch_size), dict(
        graphdef=graphdef, target_graphdef=model.graphdef, objective=objective)
    params = nnx.to_pure_dict(params)
    # The trainer's ahead-of-time compile (a failure there would only be a warning) covers the walk's step too.
    dflash_train._compile_evaluations(common.shapes_of(params), model.params, rows.rows(np.arange(cfg.batch_size)),
                                      statics)
    f32 = dflash_train.walk_evaluate(rows, cfg.batch_size, params, model.params, kind == "domino",
                                     cfg.block_size - 1, **statics)
    assert set(f32) == set(result["walk"]) and all(abs(f32[k] - v) < 0.05 for k, v in result["walk"].items())
    prompts = [tokens[: np.argmax(mask)].tolist() for tokens, mask in held_out]
    answers = [tokens[mask].tolist() for tokens, mask in held_out]
    for name, prefix in (("dflash", "base_"), ("domino", "")) if kind == "domino" else (("dflash", ""),):
        method, method_params = build(name, model, drafter=str(out / "drafter"))
        spec = speculative_generate(model.graphdef, model.params, prompts, method=method, method_params=method_params,
                                    max_new_tokens=len(answers[0]), max_cache_len=96)
        assert spec.tokens == answers
        assert f32[f"{prefix}walk_mat"] == pytest.approx(sum(map(len, answers)) / sum(map(len, spec.accepted)))
    assert f32["walk_mat"] > 1.05  # some drafts were accepted: not every step was a single token


def test_evaluate_scores_exports_as_the_trainer_scored_them(workspace, trained, tmp_path, capsys):
    """`jspec train evaluate` on a run's held-out split reproduces the run's last evaluation and its walk, from the
    exported drafters alone (float32 export, the trainer's bfloat16 compute)."""
    root, _ = workspace
    runs = {kind: [r for r in run_metrics(trained[kind][0]) if r["split"] in ("eval", "walk")][-2:]
            for kind in ("dflash", "domino")}
    args = ["train", "evaluate", "--model", str(root / "model"), "--data", str(root / "data"),
            "--drafter", str(trained["dflash"][0] / "drafter"), "--drafter", str(trained["domino"][0] / "drafter"),
            "--held-out", str(CFG.eval_records), "--seq-len", str(CFG.seq_len), "--batch-size", str(CFG.batch_size),
            "--anchors-per-seq", str(CFG.anchors_per_seq), "--compute-dtype", "bfloat16", "--out",
            str(tmp_path / "scores.json")]
    assert main(args) == 0
    result = json.loads((tmp_path / "scores.json").read_text())
    assert result["records"] == CFG.eval_records and [s["kind"] for s in result["drafters"]] == ["dflash", "domino"]
    for score, (kind, (last_eval, walk)) in zip(result["drafters"], runs.items()):
        assert last_eval["split"] == "eval" and last_eval["step"] == 30 and walk["split"] == "walk"
        expected = {k: v for k, v in {**last_eval, **walk}.items() if k not in ("step", "split")
                    and not k.endswith("loss")}
        assert set(score) == {"drafter", "kind", "block_size", *expected}, kind
        for key, value in expected.items():
            assert score[key] == pytest.approx(value, abs=1e-6), (kind, key)
    table = capsys.readouterr().out
    first, second = (s["walk_mat"] for s in result["drafters"])
    assert f"| {second:.3f} | {second / first:.3f} |" in table and "| dflash |" in table
    # The first records instead of a held-out split.
    assert main([*args[:8], "--limit", "3", "--seq-len", str(CFG.seq_len), "--batch-size", str(CFG.batch_size),
                 "--anchors-per-seq", str(CFG.anchors_per_seq)]) == 0
    assert capsys.readouterr().out.startswith("3 records, ")


@pytest.mark.parametrize("change, message", [
    (["--held-out", "4", "--limit", "4"], "--held-out and --limit choose the records in two ways"),
    (["--seq-len", "4", "--anchors-per-seq", "3"],
     "--seq-len 4 is shorter than a block of .*drafter and its anchor: use at least 5"),
    (["--anchors-per-seq", "64"], "--anchors-per-seq 64 exceeds the 63 anchor positions"),
    (["--drafter", "/nowhere"], "/nowhere: no such checkpoint directory"),
    (["--data", "/nowhere"], "--data /nowhere: no such folder"),
])
def test_evaluate_errors(workspace, trained, capsys, change, message):
    root, _ = workspace
    args = {"--model": str(root / "model"), "--data": str(root / "data"),
            "--drafter": str(trained["dflash"][0] / "drafter"), "--seq-len": "64", "--anchors-per-seq": "16"}
    flags = dict(zip(change[::2], change[1::2]))
    argv = ["train", "evaluate", *[x for k, v in {**args, **flags}.items() for x in (k, v)]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jspec: error:"), err
    assert re.search(message, err[0]), err[0]


def test_domino_backbone_starts_from_a_dflash_run(workspace, trained):
    root, model = workspace
    source = load_dflash_checkpoint(trained["dflash"][0] / "drafter", model.cfg)
    init = dataclasses.replace(DOMINO, init_backbone=str(trained["dflash"][0] / "drafter"))
    dcfg = drafter_config(model.cfg, init)
    assert dcfg.backbone == source.cfg  # the labelling too: a DFlash export's row k predicts start + k
    _, params = init_drafter(model.cfg, dcfg, init)
    for want, got in zip(jax.tree.leaves(nnx.to_pure_dict(nnx.state(source))), jax.tree.leaves(params["backbone"])):
        np.testing.assert_array_equal(got, want)
    _, fresh = init_drafter(model.cfg, dcfg, dataclasses.replace(DOMINO, init_backbone=None))
    jax.tree.map(np.testing.assert_array_equal, params["head"], fresh["head"])  # the head stays random
    with pytest.raises(UserError, match="differs from the one to train.*num_layers 2 vs 1"):
        init_drafter(model.cfg, drafter_config(model.cfg, dataclasses.replace(init, num_layers=1)),
                     dataclasses.replace(init, num_layers=1))


def test_frozen_backbone_trains_the_head_alone(workspace, trained, tmp_path):
    """--freeze-backbone on a trained DFlash drafter: the exported Domino's backbone tensors are the DFlash export's,
    bit for bit, while the head moved and its loss fell; λ stays 0 (the base loss has nothing to train)."""
    root, model = workspace
    dflash_export = trained["dflash"][0] / "drafter"
    cfg = dataclasses.replace(DOMINO, steps=10, eval_every=5, init_backbone=str(dflash_export), freeze_backbone=True)
    train_dflash(model, root / "data", tmp_path / "head", cfg, export_dtype="float32", progress=False)
    base, got = drafter_tensors(trained["dflash"][0]), drafter_tensors(tmp_path / "head")
    assert base.keys() < got.keys()
    for name in base:
        np.testing.assert_array_equal(got[name], base[name], err_msg=name)
    _, fresh = init_drafter(model.cfg, drafter_config(model.cfg, cfg), cfg)
    head = nnx.to_pure_dict(nnx.state(load_dflash_checkpoint(tmp_path / "head" / "drafter", model.cfg)))["head"]
    moved = [not np.allclose(a, b) for a, b in zip(jax.tree.leaves(head), jax.tree.leaves(fresh["head"]))]
    assert all(moved), moved
    train = [r for r in run_metrics(tmp_path / "head") if r["split"] == "train"]
    assert all(r["lambda"] == 0 for r in train) and train[-1]["loss"] < train[0]["loss"]
    assert not curriculum(cfg).any()
    # The backbone keeps the DFlash labelling (row k predicts start + k): run headless, it drafts DFlash's blocks.
    assert not load_dflash_checkpoint(tmp_path / "head" / "drafter", model.cfg).backbone.cfg.shift_label
    rng = np.random.default_rng(11)
    prompts = [rng.integers(0, VOCAB, 9).tolist(), rng.integers(0, VOCAB, 5).tolist()]
    kw = dict(max_new_tokens=24, max_cache_len=96)
    vanilla = generate(model.graphdef, model.params, prompts, **kw).tokens
    runs = {}
    for name, drafter in (("dflash", dflash_export), ("dflash", tmp_path / "head" / "drafter"),
                          ("domino", tmp_path / "head" / "drafter")):
        method, params = build(name, model, drafter=str(drafter))
        spec = speculative_generate(model.graphdef, model.params, prompts, method=method, method_params=params, **kw)
        assert spec.tokens == vanilla, (name, drafter)
        runs[name, drafter] = [list(a) for a in spec.accepted]
    assert runs["dflash", dflash_export] == runs["dflash", tmp_path / "head" / "drafter"]
    # Continuing that head (--init-from, as session 43 did) keeps the DFlash labelling, every weight from the export.
    more = dataclasses.replace(DOMINO, init_from=str(tmp_path / "head" / "drafter"), freeze_backbone=True)
    dcfg = drafter_config(model.cfg, more)
    assert not dcfg.backbone.shift_label
    _, params = init_drafter(model.cfg, dcfg, more)
    export = load_dflash_checkpoint(tmp_path / "head" / "drafter", model.cfg)
    jax.tree.map(np.testing.assert_array_equal, params, nnx.to_pure_dict(nnx.state(export)))


def test_a_frozen_backbone_head_continues_jointly(workspace, trained, tmp_path):
    """CONTINUE_AS (bench/h200_domino_relations.sh): a head trained on a frozen DFlash drafter, continued by a joint
    recipe (--init-from without --freeze-backbone, λ held at 0.5), keeps the DFlash labelling, and now its backbone
    trains too."""
    root, model = workspace
    dflash_export = trained["dflash"][0] / "drafter"
    frozen = dataclasses.replace(DOMINO, steps=4, eval_every=4, init_backbone=str(dflash_export), freeze_backbone=True)
    train_dflash(model, root / "data", tmp_path / "head", frozen, export_dtype="float32", progress=False)
    joint = dataclasses.replace(DOMINO, steps=4, eval_every=4, init_from=str(tmp_path / "head" / "drafter"),
                                curriculum_start=0.5, curriculum_end=0.5)
    assert not drafter_config(model.cfg, joint).backbone.shift_label
    np.testing.assert_array_equal(curriculum(joint), np.full(4, 0.5, np.float32))
    train_dflash(model, root / "data", tmp_path / "joint", joint, export_dtype="float32", progress=False)
    base, got = drafter_tensors(trained["dflash"][0]), drafter_tensors(tmp_path / "joint")
    assert any(not np.allclose(got[name], base[name]) for name in base)
    assert all(r["lambda"] == 0.5 for r in run_metrics(tmp_path / "joint") if r["split"] == "train")


def test_reach_weighted_head_trains_on_a_frozen_backbone(workspace, trained, tmp_path):
    """The head alone with --position-weights reach: its loss falls, and the held-out base accepted length is the
    DFlash drafter's (the backbone stays frozen)."""
    root, model = workspace
    cfg = dataclasses.replace(DOMINO, steps=10, eval_every=5, init_backbone=str(trained["dflash"][0] / "drafter"),
                              freeze_backbone=True, position_weights="reach")
    train_dflash(model, root / "data", tmp_path / "head", cfg, export_dtype="float32", progress=False)
    metrics = run_metrics(tmp_path / "head")
    train = [r for r in metrics if r["split"] == "train"]
    evals = [r for r in metrics if r["split"] == "eval"]
    assert train[-1]["final_loss"] < train[0]["final_loss"]
    dflash_eval = [r for r in run_metrics(trained["dflash"][0]) if r["split"] == "eval"][-1]
    assert evals[-1]["base_accept_len"] == pytest.approx(dflash_eval["accept_len"], rel=1e-5)
    with pytest.raises(UserError, match="--position-weights must be one of decay, reach, got 'flat'"):
        dataclasses.replace(cfg, position_weights="flat")


def test_freeze_backbone_errors():
    with pytest.raises(UserError, match="--freeze-backbone keeps the backbone as it starts: give it a trained one"):
        dataclasses.replace(DOMINO, freeze_backbone=True)
    with pytest.raises(UserError, match="--freeze-backbone apply to `jspec train domino`"):
        dataclasses.replace(CFG, freeze_backbone=True, init_from="x")


@pytest.mark.parametrize("kind, base", [("dflash", CFG), ("domino", DOMINO)])
def test_init_from_starts_every_weight_from_an_exported_drafter(workspace, trained, kind, base):
    root, model = workspace
    export = trained[kind][0] / "drafter"
    source = nnx.to_pure_dict(nnx.state(load_dflash_checkpoint(export, model.cfg)))
    cfg = dataclasses.replace(base, init_from=str(export))
    _, params = init_drafter(model.cfg, drafter_config(model.cfg, cfg), cfg)
    jax.tree.map(np.testing.assert_array_equal, params, source)  # the head too


def test_training_continues_from_init_from(workspace, trained, tmp_path):
    """At a learning rate of ~0, the continued run's held-out loss is the exported run's last, not a fresh start's."""
    root, model = workspace
    last = [r for r in run_metrics(trained["dflash"][0]) if r["split"] == "eval"][-1]["loss"]
    still = dataclasses.replace(CFG, steps=10, lr=1e-9, init_from=str(trained["dflash"][0] / "drafter"))
    train_dflash(model, root / "data", tmp_path / "more", still, export_dtype="float32", progress=False)
    evals = [r for r in run_metrics(tmp_path / "more") if r["split"] == "eval"]
    first = [r for r in run_metrics(trained["dflash"][0]) if r["split"] == "eval"][0]["loss"]
    assert evals[-1]["loss"] == pytest.approx(last, rel=1e-3) and abs(evals[-1]["loss"] - first) > 0.1


def test_init_from_errors(workspace, trained):
    root, model = workspace
    domino_export = str(trained["domino"][0] / "drafter")
    with pytest.raises(UserError, match="holds a Domino drafter .with its head.; `jspec train dflash` trains a DFlash"):
        init_drafter(model.cfg, drafter_config(model.cfg, CFG), dataclasses.replace(CFG, init_from=domino_export))
    wider = dataclasses.replace(DOMINO, rank=8, init_from=domino_export)
    with pytest.raises(UserError, match="its drafter differs from the one to train .rank 16 vs 8."):
        init_drafter(model.cfg, drafter_config(model.cfg, wider), wider)
    with pytest.raises(UserError, match="--init-backbone and --init-from both set the drafter's start"):
        dataclasses.replace(DOMINO, init_backbone="x", init_from="y")


@pytest.mark.parametrize("base", [CFG, DOMINO], ids=["dflash", "domino"])
def test_draft_layers_start_as_copies_of_the_last_target_layers(qwen, base):
    cfg = dataclasses.replace(base, intermediate_size=None, init_layers="target")
    first = QWEN.num_layers - cfg.num_layers
    dcfg = drafter_config(QWEN, cfg)
    _, params = init_drafter(QWEN, dcfg, cfg, qwen.params)
    backbone, target = (params["backbone"] if cfg.domino else params), nnx.to_pure_dict(qwen.params)
    for i in range(cfg.num_layers):
        src, got = target["layers"][first + i], backbone["layers"][i]
        for name in ("qkv", "o", "q_norm", "k_norm"):
            jax.tree.map(np.testing.assert_array_equal, got[name], src["attn"][name])
        for name in ("input_norm", "post_attn_norm", "mlp"):
            jax.tree.map(np.testing.assert_array_equal, got[name], src[name])
    jax.tree.map(np.testing.assert_array_equal, backbone["norm"], target["norm"])
    d, taps = QWEN.hidden_size, len((dcfg.backbone if cfg.domino else dcfg).tap_layers)
    np.testing.assert_array_equal(backbone["fc"], np.eye(d, taps * d, (taps - 1) * d))  # the last tap passes through
    if cfg.domino:  # the head stays random
        _, fresh = init_drafter(QWEN, dcfg, dataclasses.replace(cfg, init_layers="random"))
        jax.tree.map(np.testing.assert_array_equal, params["head"], fresh["head"])


def test_init_layers_errors(qwen):
    for change, message in ((dict(num_layers=9), "9 draft layers but the target has only 8"),
                            (dict(intermediate_size=48), "--intermediate-size 48 differs from the target's 64")):
        cfg = dataclasses.replace(CFG, init_layers="target", **{"intermediate_size": None, **change})
        with pytest.raises(UserError, match=message):
            init_drafter(QWEN, drafter_config(QWEN, cfg), cfg, qwen.params)
    with pytest.raises(UserError, match="--init-layers must be one of"):
        dataclasses.replace(CFG, init_layers="target-last")
    with pytest.raises(UserError, match="--init-layers and --init-backbone both"):
        dataclasses.replace(DOMINO, init_layers="target", init_backbone="x")


# ---- CLI -----------------------------------------------------------------------------------------------------------

def _cli(workspace, command, out, *extra):
    root, _ = workspace
    # CFG's shapes, so the compiled train steps are reused (--steps is not a compile-time input).
    return ["train", command, "--model", str(root / "model"), "--data", str(root / "data"), "--out", str(out),
            "--steps", "4", "--batch-size", "4", "--seq-len", "64", "--block-size", "4", "--num-layers", "2",
            "--anchors-per-seq", "16", "--gamma-decay", "4", "--intermediate-size", "48", "--eval-records", "8",
            "--eval-every", "2", "--warmup-steps", "1", *extra]


def test_cli_trains_and_exports(workspace, tmp_path, capsys):
    assert main(_cli(workspace, "dflash", tmp_path / "run")) == 0
    err = capsys.readouterr().err
    assert "step 2/4  eval loss" in err and "exported DFlash drafter" in err
    cfg = json.loads((tmp_path / "run" / "drafter" / "config.json").read_text())
    assert cfg["block_size"] == 4 and cfg["num_hidden_layers"] == 2 and "projector_type" not in cfg["dflash_config"]
    weights = drafter_tensors(tmp_path / "run")
    assert weights["fc.weight"].dtype == ml_dtypes.bfloat16  # the default export dtype
    assert main(_cli(workspace, "dflash", tmp_path / "run", "--export", "--dtype", "float32")) == 0
    assert drafter_tensors(tmp_path / "run")["fc.weight"].dtype == np.float32
    # Domino with training-time test and without the curriculum (its own compilation: the GRU reads its drafts).
    assert main(_cli(workspace, "domino", tmp_path / "ttt", "--gru-hidden", "16", "--rank", "16", "--ttt",
                     "--no-curriculum", "--steps", "2")) == 0
    assert "exported Domino drafter" in capsys.readouterr().err
    run = json.loads((tmp_path / "ttt" / "run.json").read_text())["config"]
    assert run["domino"] and run["ttt"] and not run["curriculum"]
    assert json.loads((tmp_path / "ttt" / "drafter" / "config.json").read_text())["dflash_config"][
        "projector_type"] == "domino"
    # --head-off trains and exports the plain DFlash recipe (here with reach-weighted drafts).
    assert main(_cli(workspace, "domino", tmp_path / "off", "--head-off", "--steps", "2",
                     "--position-weights", "reach")) == 0
    run = json.loads((tmp_path / "off" / "run.json").read_text())["config"]
    assert not run["domino"] and run["position_weights"] == "reach"
    assert "projector_type" not in json.loads((tmp_path / "off" / "drafter" / "config.json").read_text())[
        "dflash_config"]


def test_train_only_data_joins_training_and_keeps_the_held_out_set(workspace, tmp_path, monkeypatch, capsys):
    """--train-only-data: its records are trained on after --data's, the held-out records are the ones a run on --data
    alone holds out, run.json names the folders, and resuming without them is refused. With --held-out-only, --data
    gives the held-out records alone and --train-only-data all the training ones."""
    root, model = workspace
    tiny_checkpoint.write_data(tmp_path / "extra", model, n=12, seed=2)
    seen = {"train": [], "eval": []}
    real_batcher, real_pack = dflash_train.Batcher, dflash_train.pack

    def batcher(records, *args, **kwargs):
        seen["train"].append(records)
        return real_batcher(records, *args, **kwargs)

    def pack(records, *args):
        seen["eval"].append(records)
        return real_pack(records, *args)

    monkeypatch.setattr(dflash_train, "Batcher", batcher)
    monkeypatch.setattr(dflash_train, "pack", pack)
    assert main(_cli(workspace, "dflash", tmp_path / "plain", "--steps", "2")) == 0
    assert main(_cli(workspace, "dflash", tmp_path / "more", "--steps", "2",
                     "--train-only-data", str(tmp_path / "extra"))) == 0
    assert main(_cli(workspace, "dflash", tmp_path / "fresh", "--steps", "2",
                     "--train-only-data", str(tmp_path / "extra"), "--held-out-only")) == 0
    (plain_train, more_train, fresh_train), (plain_eval, more_eval, fresh_eval) = seen["train"], seen["eval"]
    extra = dflash_train.load_records(tmp_path / "extra", VOCAB, 64)

    def same(a, b):
        return len(a) == len(b) and all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1])
                                        for x, y in zip(a, b))

    assert len(plain_eval) == 8 and same(more_eval, plain_eval) and same(fresh_eval, plain_eval)
    assert len(extra) == 12 and same(more_train, plain_train + extra)
    assert same(fresh_train, extra)  # --held-out-only: none of --data trains
    plain, more, fresh = (json.loads((tmp_path / run / "run.json").read_text()) for run in ("plain", "more", "fresh"))
    assert plain["train_only_data"] is None and "held_out_only" not in plain and "held_out_only" not in more
    assert more["train_only_data"] == fresh["train_only_data"] == str((tmp_path / "extra").absolute())
    assert fresh["held_out_only"] is True
    capsys.readouterr()
    assert main(_cli(workspace, "dflash", tmp_path / "more", "--steps", "4", "--resume")) == 2
    err = capsys.readouterr().err
    assert "holds a run with other settings" in err and "train_only_data" in err
    assert main(_cli(workspace, "dflash", tmp_path / "fresh", "--steps", "4", "--resume",
                     "--train-only-data", str(tmp_path / "extra"))) == 2
    assert "held_out_only" in capsys.readouterr().err
    assert main(_cli(workspace, "dflash", tmp_path / "alone", "--held-out-only")) == 2
    assert "--held-out-only trains on --train-only-data alone" in capsys.readouterr().err
    assert main(_cli(workspace, "dflash", tmp_path / "none", "--held-out-only", "--train-only-data",
                     str(tmp_path / "extra"), "--eval-records", "0")) == 2
    assert "--eval-records must be > 0" in capsys.readouterr().err


def test_generate_runs_the_fast_domino_head(workspace, trained, capsys):
    """`jspec generate` with the bench's fastest Domino configuration (candidates, GRU table, block kernel, head
    stop; the XLA loop off GPU) emits vanilla's tokens."""
    root, _ = workspace
    prompt = ["--model", str(root / "model"), "--prompt", "t3 t7 t1 t9", "--max-new-tokens", "16", "--raw",
              "--dtype", "float32", "--json", "--max-cache-len", "128"]

    def tokens(*extra):
        capsys.readouterr()
        assert main(["generate", *prompt, *extra]) == 0
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])["tokens"]

    fast = tokens("--method", "domino", "--drafter", str(trained["domino"][0] / "drafter"), "--candidates", "4",
                  "--gru-table", "--head-kernel", "block", "--head-stop", "0.1")
    assert fast == tokens("--method", "vanilla") and len(fast) == 16


def test_bench_takes_block_drafters(workspace, trained, tmp_path, capsys):
    root, _ = workspace
    drafters = ["--dflash-drafter", str(trained["dflash"][0] / "drafter"), "--domino-drafter",
                str(trained["domino"][0] / "drafter")]
    bench = ["bench", "--model", str(root / "model"), "--dataset", "gsm8k", "--limit", "2", "--max-new-tokens", "12",
             "--out", str(tmp_path / "bench")]
    assert main([*bench, "--methods", "dflash,domino,graft_tail", *drafters]) == 0
    records = [json.loads(line) for line in (tmp_path / "bench" / "results.jsonl").read_text().splitlines()]
    assert {r["method"] for r in records} == {"vanilla", "dflash", "domino", "graft_tail"}
    assert all(r["identical"] for r in records)
    capsys.readouterr()
    assert main([*bench, "--methods", "graft_tail", *drafters[:2]]) == 0  # graft_tail takes either drafter
    assert main([*bench, "--methods", "dflash,domino", *drafters[:2]]) == 2
    assert capsys.readouterr().err.strip().endswith("domino needs a checkpoint directory: --domino-drafter")


@pytest.mark.parametrize("command, change, message", [
    ("dflash", ["--anchors-per-seq", "64"], "--anchors-per-seq 64 exceeds the 63 anchor positions"),
    ("dflash", ["--seq-len", "4"], "--seq-len 4 is shorter than a block"),
    ("dflash", ["--gamma-decay", "0"], "--gamma-decay must be > 0"),
    ("domino", ["--position-weights", "uniform"], "argument --position-weights: invalid choice: 'uniform'"),
    ("dflash", ["--ttt"], "unrecognized arguments: --ttt"),
    ("domino", ["--curriculum-fraction", "0"], r"--curriculum-fraction must be in \(0, 1\]"),
    ("domino", ["--curriculum-start", "1.5"], r"--curriculum-start must be in \[0, 1\], got 1.5"),
    ("domino", ["--curriculum-start", "0.3", "--curriculum-end", "0.5"],
     r"--curriculum-end must be in \[0, --curriculum-start = 0.3\], got 0.5"),
    ("dflash", ["--curriculum-start", "0.5"], "unrecognized arguments: --curriculum-start"),
    ("domino", ["--head-off", "--ttt"],
     "--ttt, --init-backbone and --freeze-backbone apply to `jspec train domino` with its head"),
    ("domino", ["--freeze-backbone"], "--freeze-backbone keeps the backbone as it starts"),
    ("domino", ["--init-backbone", "/nowhere"], "/nowhere: no such checkpoint directory"),
    ("dflash", ["--init-from", "/nowhere"], "/nowhere: no such checkpoint directory"),
    ("dflash", ["--init-layers", "target"], "--intermediate-size 48 differs from the target's 64"),
    ("dflash", ["--init-layers", "middle"], "argument --init-layers: invalid choice"),
    ("domino", ["--export"], "holds no training run"),
])
def test_cli_errors(workspace, tmp_path, capsys, command, change, message):
    assert main(_cli(workspace, command, tmp_path / "out", *change)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jspec: error:"), err
    assert re.search(message, err[0]), err[0]


def test_head_lr_scale_moves_the_head_alone_further(workspace):
    """--head-lr-scale X: one step from the same state moves every head weight X times as far, and the backbone
    exactly as far, as the plain step does."""
    root, model = workspace
    records = dflash_train.load_records(root / "data", model.cfg.vocab_size, DOMINO.seq_len)
    batch = {k: jnp.asarray(v) for k, v in Batcher(records, DOMINO.seq_len, DOMINO.batch_size, 0).next().items()}
    graphdef, params = init_drafter(model.cfg, drafter_config(model.cfg, DOMINO), DOMINO)
    taps = drafter_config(model.cfg, DOMINO).backbone.tap_layers
    moved = {}
    for scale in (1.0, 3.0):
        state = {"params": params, "opt": dflash_train.make_optimizer(0.0).init(params)}
        objective = dflash_train.Objective(taps=taps, anchors=DOMINO.anchors_per_seq, gamma=DOMINO.gamma_decay,
                                           ttt=False, seed=0, compute_dtype="float32", head_lr_scale=scale)
        new, _ = dflash_train.train_step(jax.tree.map(jnp.copy, state), model.params, batch, jnp.float32(1e-3),
                                         jnp.float32(0.5), jnp.int32(0), graphdef=graphdef,
                                         target_graphdef=model.graphdef, objective=objective)
        moved[scale] = jax.tree.map(lambda a, b: np.asarray(a) - np.asarray(b), new["params"], params)
    jax.tree.map(np.testing.assert_array_equal, moved[3.0]["backbone"], moved[1.0]["backbone"])
    assert any(np.abs(d).max() > 0 for d in jax.tree.leaves(moved[1.0]["head"]))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, 3 * b, rtol=1e-5, atol=2e-8),  # (p + u) - p rounds
                 moved[3.0]["head"], moved[1.0]["head"])
    with pytest.raises(UserError, match="--head-lr-scale must be > 0, got 0"):
        dataclasses.replace(DOMINO, head_lr_scale=0.0)
    with pytest.raises(UserError, match="--head-lr-scale applies to `jspec train domino`"):
        dataclasses.replace(CFG, head_lr_scale=2.0)
