"""Reading an HF-style drafter checkpoint directory (config.json + safetensors) with one clear error per problem, and
writing one."""

import json
import os
import pathlib

import numpy as np
import safetensors
import safetensors.numpy
from jaxtyping import Shaped

from jspec.errors import UserError


def read_config(path: pathlib.Path, kind: str) -> dict:
    """`path/config.json` as a dict; `kind` names the checkpoint in errors, with its article ("an EAGLE-3",
    "a DFlash/Domino")."""
    if not path.is_dir():
        raise UserError(f"{path}: no such checkpoint directory")
    config_path = path / "config.json"
    if not config_path.is_file():
        raise UserError(f"{path}: not {kind} checkpoint directory (no config.json)")
    try:
        hf = json.loads(config_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{config_path}: invalid JSON ({e})") from None
    if not isinstance(hf, dict):
        raise UserError(f"{config_path}: expected a JSON object")
    return hf


def read_safetensors(path: pathlib.Path, pattern: str = "*.safetensors") -> dict[str, Shaped[np.ndarray, "..."]]:
    """Every tensor of the files matching `pattern` in `path` (one file, or the shards of a sharded checkpoint)."""
    files = sorted(path.glob(pattern))
    if not files:
        hint = " (pytorch_model.bin is not supported: convert it to safetensors)" if (
            path / "pytorch_model.bin").exists() else ""
        raise UserError(f"{path}: no {pattern}{hint}")
    tensors = {}
    for file in files:
        try:
            with safetensors.safe_open(str(file), framework="numpy") as f:
                tensors |= {name: f.get_tensor(name) for name in f.keys()}
        except Exception as e:  # safetensors raises several types for truncated / garbled files
            raise UserError(f"{file}: corrupt safetensors file ({e})") from None
    return tensors


def write_checkpoint_dir(path: pathlib.Path, config: dict, tensors: dict[str, Shaped[np.ndarray, "..."]],
                         weights_file: str) -> None:
    """`path/config.json` and `path/weights_file`, both under temporary names first, so that an interrupted write
    leaves no half checkpoint behind."""
    path.mkdir(parents=True, exist_ok=True)
    weights_tmp = path / f"{weights_file}.tmp{os.getpid()}"
    config_tmp = path / f"config.json.tmp{os.getpid()}"
    try:
        safetensors.numpy.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(weights_tmp))
        config_tmp.write_text(json.dumps(config, indent=2) + "\n")
        os.replace(weights_tmp, path / weights_file)
        os.replace(config_tmp, path / "config.json")
    finally:
        weights_tmp.unlink(missing_ok=True)
        config_tmp.unlink(missing_ok=True)
