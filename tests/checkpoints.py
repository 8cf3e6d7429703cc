"""Shared by the trainer tests: damage a saved training checkpoint the way an interrupted copy would."""

import pathlib


def truncate_checkpoint_arrays(out: pathlib.Path, step: int) -> pathlib.Path:
    """Cuts every array data file of checkpoint `step` under run folder `out` to 7 bytes; returns the step folder."""
    step_dir = out / "checkpoints" / str(step)
    for f in (step_dir / "state").rglob("*"):
        if f.is_file() and f.parent.name == "d":
            f.write_bytes(f.read_bytes()[:7])
    return step_dir
