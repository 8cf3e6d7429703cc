"""bench/train_profile.py: its synthetic batch is what the block trainers accept (full rows, anchors available,
records kept apart), and a tiny profile of every trainer runs end to end with the trainers' own step."""

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.step_breakdown import random_model  # noqa: E402
from bench.train_profile import profile_kind, random_batch  # noqa: E402
from jspec.train.dflash import anchor_candidates  # noqa: E402


def test_random_batch_is_packed_with_anchors():
    batch = random_batch(vocab=1000, batch_size=3, seq_len=512)
    assert batch["tokens"].shape == (3, 512)
    assert ((batch["tokens"] >= 100) & (batch["tokens"] < 900) | (batch["segments"] == 0)).all()
    for row in range(3):
        seg, pos, mask = batch["segments"][row], batch["positions"][row], batch["loss_mask"][row]
        for s in set(seg[seg > 0].tolist()):
            span = seg == s
            length = span.sum()
            assert (pos[span] == np.arange(length)).all()  # positions restart per record
            assert mask[span].sum() == length - length // 2  # the second half is the answer
    assert np.asarray(anchor_candidates(batch)).sum(axis=1).min() > 0


def test_profile_kinds_run():
    model = random_model("smollm2-135m", "float32", num_layers=8)  # the same trainers at a quarter of the compiling
    batch = random_batch(model.cfg.vocab_size, batch_size=1, seq_len=256)
    block = dict(num_layers=1, anchors_per_seq=4)
    for kind, shape in (("dflash", block), ("domino", block), ("eagle3", dict(draft_vocab_size=512, ttt_steps=2)),
                        ("domino", dict(block, labels="target", frozen_backbone=True))):
        ms, table = profile_kind(model, kind, batch, steps=1, profile_steps=0, compute_dtype="float32", **shape)
        assert set(ms) == {"step", "target", "forward", "backward"} and table is None
        assert ms["step"] > 0 and ms["target"] > 0 and ms["forward"] > 0
