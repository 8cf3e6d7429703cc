"""bench/task_walk.py on SmolLM2's first 4 layers (its tokenizer and chat template) with random block drafters:
answers to each task's prompts past the bench's, both drafters scored on them, a row per task."""

import importlib.util
import json
import pathlib

import jax.numpy as jnp
import pytest
from flax import nnx

from jspec.bench.datasets import load_prompts
from jspec.drafters.dflash import DFlashConfig, DFlashDrafter
from jspec.drafters.domino import DominoConfig, DominoDrafter
from jspec.io.dflash_checkpoint import save_dflash_checkpoint
from jspec.models.loading import load_model
from jspec.train.distill import read_dataset

_spec = importlib.util.spec_from_file_location(
    "task_walk", pathlib.Path(__file__).resolve().parents[1] / "bench" / "task_walk.py")
task_walk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(task_walk)


@pytest.mark.real_model
def test_task_walk_scores_each_task_past_the_bench_prompts(smollm2_4_layers, tmp_path, capsys):
    cfg = load_model(str(smollm2_4_layers), dtype="float32", progress=False).cfg
    backbone = DFlashConfig.for_target(cfg, 1, block_size=4, intermediate_size=64)
    drafters = {"dflash": DFlashDrafter(backbone, dtype=jnp.float32, rngs=nnx.Rngs(0)),
                "domino": DominoDrafter(DominoConfig(DFlashConfig.for_target(cfg, 1, block_size=4, intermediate_size=64,
                                                                             shift_label=True),
                                                     gru_hidden=16, rank=8, prefix_len=1),
                                        dtype=jnp.float32, rngs=nnx.Rngs(1))}
    for name, drafter in drafters.items():
        save_dflash_checkpoint(drafter, tmp_path / name / "drafter", cfg.num_layers)
    argv = ["--model", str(smollm2_4_layers), "--drafter", str(tmp_path / "dflash" / "drafter"), "--drafter",
            str(tmp_path / "domino" / "drafter"), "--tasks", "gsm8k,mtbench", "--skip", "3", "--prompts", "5",
            "--batch-size", "2", "--max-new-tokens", "12", "--seq-len", "256", "--anchors-per-seq", "64",
            "--eval-batch-size", "2", "--dtype", "float32", "--out", str(tmp_path / "out")]
    assert task_walk.main(argv) == 0
    out = tmp_path / "out"
    for task in ("gsm8k", "mtbench"):  # 5 prompts asked, 4 kept: whole batches of 2
        assert [r[0] for r in read_dataset(out / "data" / task)] == [p["id"] for p in load_prompts(task, 7)[3:]]
    result = json.loads((out / "task_walk.json").read_text())
    assert [r["task"] for r in result["rows"]] == ["gsm8k", "mtbench"]
    for row in result["rows"]:
        scores = result["scores"][row["task"]]
        assert scores["records"] == row["records"] == 4
        assert [d["kind"] for d in scores["drafters"]] == ["dflash", "domino"]
        assert row["walk"] == [d["walk_mat"] for d in scores["drafters"]]
        assert row["walk_ratio"] == pytest.approx(row["walk"][1] / row["walk"][0])
        assert row["base_walk"] == scores["drafters"][1]["base_walk_mat"]
        # Random drafters: the loop still commits a token a step, so MAT is at least 1 and an anchor's accept
        # length at least 1.
        assert all(w >= 1.0 for w in row["walk"] + row["anchor"])
    summary = (out / "summary.md").read_text()
    assert "| gsm8k | 4 |" in summary and "| **mean** |" in summary and summary in capsys.readouterr().out
    assert (out / "task_walk.png").stat().st_size > 5_000
    # Too few prompts past the skip for one batch is an error, not an empty row.
    assert task_walk.main([*argv[:6], "--tasks", "mtbench", "--skip", "79", *argv[10:]]) == 2
    assert "mtbench: fewer than --batch-size 2 prompts past the first 79" in capsys.readouterr().err
