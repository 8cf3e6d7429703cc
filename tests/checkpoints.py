"""Shared by the trainer tests: read a run folder's metrics and exported weights, compare two runs, and damage a
saved training checkpoint the way an interrupted copy would."""

import json
import pathlib

import numpy as np
import safetensors.numpy


def run_metrics(out: pathlib.Path) -> list[dict]:
    """The run's metrics records without their wall-clock times (which differ between equal runs)."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in records]


def drafter_tensors(out: pathlib.Path) -> dict[str, np.ndarray]:
    """The exported drafter weights of run folder `out`."""
    return safetensors.numpy.load_file(str(out / "drafter" / "model.safetensors"))


def assert_same_run(want: pathlib.Path, got: pathlib.Path) -> dict[str, np.ndarray]:
    """Two run folders exported bit-identical weights and logged identical metrics; returns the weights."""
    want_tensors, got_tensors = drafter_tensors(want), drafter_tensors(got)
    assert want_tensors.keys() == got_tensors.keys()
    for name in want_tensors:
        np.testing.assert_array_equal(got_tensors[name], want_tensors[name], err_msg=name)
    assert run_metrics(got) == run_metrics(want)
    return want_tensors


def truncate_checkpoint_arrays(out: pathlib.Path, step: int) -> pathlib.Path:
    """Cuts every array data file of checkpoint `step` under run folder `out` to 7 bytes; returns the step folder."""
    step_dir = out / "checkpoints" / str(step)
    for f in (step_dir / "state").rglob("*"):
        if f.is_file() and f.parent.name == "d":
            f.write_bytes(f.read_bytes()[:7])
    return step_dir
