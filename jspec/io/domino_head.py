"""A Domino checkpoint as its DFlash backbone plus its head.

A head trained on a frozen DFlash drafter (`jspec train domino --freeze-backbone`) leaves every backbone tensor as
it was, so the head alone (the GRU and the low-rank projection: 95 MB in bfloat16 over Qwen2.5-Coder-1.5B, against
560 MB for the whole drafter) is all a device session has to send back, and the backbone is a DFlash drafter that
need not travel separately. Three operations on checkpoint directories (config.json + safetensors):

    backbone(domino)        -> the DFlash checkpoint inside it (the head's tensors and config fields dropped)
    head(domino, base)      -> the head alone, after checking the backbone equals `base` bit for bit
    join(base, head)        -> the whole Domino checkpoint again
"""

import os
import pathlib

import numpy as np

from jspec.errors import UserError
from jspec.io.checkpoint_dir import read_config, read_safetensors, write_checkpoint_dir
from jspec.io.dflash_checkpoint import DOMINO, WEIGHTS_FILE

HEAD_PREFIXES = ("prefix_gru.", "embed_proj.")  # Domino's tensors on top of DFlash's
HEAD_FIELDS = ("projector_type", "gru_hidden_dim", "emb_dim", "pure_draft_prefix_len")  # ... and dflash_config fields
HEAD_FILE = "head.safetensors"
KIND = "a DFlash/Domino"


def _is_head(name: str) -> bool:
    return name.startswith(HEAD_PREFIXES)


def _read_domino(path: pathlib.Path) -> tuple[dict, dict[str, np.ndarray]]:
    config = read_config(path, KIND)
    if (config.get("dflash_config") or {}).get("projector_type") != DOMINO:
        raise UserError(f"{path}: not a Domino checkpoint (dflash_config.projector_type is not {DOMINO!r})")
    return config, read_safetensors(path, WEIGHTS_FILE)


def backbone_config(domino_config: dict) -> dict:
    """The DFlash config.json under a Domino one: `dflash_config` without the head's fields."""
    extra = {k: v for k, v in domino_config["dflash_config"].items() if k not in HEAD_FIELDS}
    if not extra.get("shift_label", False):
        extra.pop("shift_label", None)  # false is DFlash's default, and what a DFlash export leaves out
    return {**domino_config, "dflash_config": extra}


def backbone(domino_dir: str | os.PathLike, out_dir: str | os.PathLike) -> None:
    """Writes the DFlash drafter a Domino checkpoint is built on."""
    config, tensors = _read_domino(pathlib.Path(domino_dir))
    write_checkpoint_dir(pathlib.Path(out_dir), backbone_config(config),
           {k: v for k, v in tensors.items() if not _is_head(k)}, WEIGHTS_FILE)


def head(domino_dir: str | os.PathLike, base_dir: str | os.PathLike, out_dir: str | os.PathLike) -> None:
    """Writes the head alone (`head.safetensors` and the whole Domino config.json), once the backbone is checked to be
    `base_dir`'s DFlash drafter bit for bit: a head is only worth anything on the backbone it was trained on."""
    domino_dir, base_dir = pathlib.Path(domino_dir), pathlib.Path(base_dir)
    config, tensors = _read_domino(domino_dir)
    _check_base(base_dir, config, {k: v for k, v in tensors.items() if not _is_head(k)}, str(domino_dir))
    write_checkpoint_dir(pathlib.Path(out_dir), config, {k: v for k, v in tensors.items() if _is_head(k)}, HEAD_FILE)


def join(base_dir: str | os.PathLike, head_dir: str | os.PathLike, out_dir: str | os.PathLike) -> None:
    """Writes the whole Domino checkpoint from a DFlash drafter and a head made by `head` on it."""
    base_dir, head_dir = pathlib.Path(base_dir), pathlib.Path(head_dir)
    config = read_config(head_dir, "a Domino head")
    head_tensors = read_safetensors(head_dir, HEAD_FILE)
    if not head_tensors or not all(_is_head(k) for k in head_tensors):
        raise UserError(f"{head_dir}: {HEAD_FILE} holds tensors other than a Domino head's "
                        f"({sorted(head_tensors)[:3]})")
    base_tensors = read_safetensors(base_dir, WEIGHTS_FILE)
    _check_base(base_dir, config, base_tensors, str(head_dir), compare_tensors=False)
    write_checkpoint_dir(pathlib.Path(out_dir), config, base_tensors | head_tensors, WEIGHTS_FILE)


def _check_base(base_dir: pathlib.Path, domino_config: dict, backbone_tensors: dict[str, np.ndarray], source: str,
                compare_tensors: bool = True) -> None:
    base_config = read_config(base_dir, KIND)
    if (base_config.get("dflash_config") or {}).get("projector_type") is not None:
        raise UserError(f"{base_dir}: not a DFlash checkpoint (it has a projector_type)")
    if backbone_config(domino_config) != base_config:
        raise UserError(f"{source}: its backbone's config differs from {base_dir}'s: not a head on that DFlash drafter")
    if not compare_tensors:
        return
    base_tensors = read_safetensors(base_dir, WEIGHTS_FILE)
    if set(base_tensors) != set(backbone_tensors):
        raise UserError(f"{source}: its backbone's tensors are not {base_dir}'s "
                        f"(differing names: {sorted(set(base_tensors) ^ set(backbone_tensors))[:3]})")
    changed = [k for k in sorted(base_tensors) if base_tensors[k].dtype != backbone_tensors[k].dtype
               or not np.array_equal(base_tensors[k], backbone_tensors[k])]
    if changed:
        raise UserError(f"{source}: its backbone differs from {base_dir} ({len(changed)} tensors, e.g. {changed[0]}): "
                        "the head was not trained on that frozen DFlash drafter")
