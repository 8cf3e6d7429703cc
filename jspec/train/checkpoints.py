"""Orbax checkpoints of a training run: per step, a pytree of arrays (restored bit for bit) and JSON metadata.

Saving is synchronous: the train step donates its state, so the arrays must be on disk before the next step reuses
their buffers, and a run stopped right after a save must find it complete. Orbax writes each step to a temporary
folder and renames it when done, so an interrupted save leaves no half step behind. Each step folder also gets a
SHA-256 list of its files, checked before restoring: a truncated or altered file is a `UserError` naming it, found
before Orbax reads it (whose own failures on damaged data surface late, from background threads).
"""

import hashlib
import json
import os
import pathlib

import orbax.checkpoint as ocp
from jaxtyping import PyTree

from jspec.errors import UserError


CHECKSUMS = "jspec_checksums.json"


def _digests(step_dir: pathlib.Path) -> dict[str, str]:
    return {str(f.relative_to(step_dir)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(step_dir.rglob("*")) if f.is_file() and f.name != CHECKSUMS}


def _verify(step_dir: pathlib.Path) -> None:
    try:
        want = json.loads((step_dir / CHECKSUMS).read_text())
    except (OSError, ValueError):
        raise UserError(f"{step_dir}: incomplete checkpoint (no readable {CHECKSUMS}); delete that folder to resume "
                        "from an earlier one") from None
    got = _digests(step_dir)
    bad = sorted(name for name in set(want) | set(got) if want.get(name) != got.get(name))
    if bad:
        raise UserError(f"{step_dir}: corrupt or incomplete checkpoint ({step_dir / bad[0]} is missing or altered); "
                        "delete that folder to resume from an earlier one")


def _reason(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__


class Checkpoints:
    def __init__(self, directory: pathlib.Path, max_to_keep: int = 2):
        self.directory = directory.absolute()
        if self.directory.exists() and not self.directory.is_dir():
            raise UserError(f"{self.directory}: expected a checkpoint folder, found a file")
        options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, enable_async_checkpointing=False, create=True)
        try:
            self._manager = ocp.CheckpointManager(self.directory, item_names=("state", "meta"), options=options)
        except (OSError, ValueError) as e:
            raise UserError(f"{self.directory}: cannot open checkpoints ({_reason(e)})") from None

    def __enter__(self) -> "Checkpoints":
        return self

    def __exit__(self, *exc) -> None:
        self._manager.close()

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, state: PyTree, meta: dict) -> None:
        self._manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                         meta=ocp.args.JsonSave(meta)))
        self._manager.wait_until_finished()
        step_dir = self.directory / str(step)
        tmp = step_dir / f"{CHECKSUMS}.tmp"
        tmp.write_text(json.dumps(_digests(step_dir), indent=1))
        os.replace(tmp, step_dir / CHECKSUMS)

    def restore(self, step: int, abstract_state: PyTree) -> tuple[PyTree, dict]:
        """The arrays of `step` in the structure, shapes and dtypes of `abstract_state`, and its metadata."""
        _verify(self.directory / str(step))
        try:
            out = self._manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state),
                                                                      meta=ocp.args.JsonRestore()))
        except Exception as e:  # orbax / tensorstore raise many types for missing, truncated or garbled files
            raise UserError(f"{self.directory / str(step)}: corrupt or incomplete checkpoint ({_reason(e)}); delete "
                            "that folder to resume from an earlier one") from None
        if not isinstance(out.meta, dict):
            raise UserError(f"{self.directory / str(step)}: checkpoint metadata is not a JSON object")
        return out.state, out.meta
