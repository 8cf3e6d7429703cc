"""Reading an HF-style drafter checkpoint directory (config.json + safetensors) with one clear error per problem."""

import json
import pathlib

import numpy as np
import safetensors
from jaxtyping import Shaped

from jspec.errors import UserError


def read_config(path: pathlib.Path, kind: str) -> dict:
    """`path/config.json` as a dict; `kind` names the checkpoint in errors, with its article ("an EAGLE-3", "a DFlash/Domino")."""
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
