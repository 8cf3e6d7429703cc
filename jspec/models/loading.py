"""Resolve a model name or path to (config, graphdef, params, tokenizer), using the dequantized-weights cache."""

import dataclasses
import pathlib
import sys
import time

from flax import nnx

from jspec.config import ModelConfig, model_preset
from jspec.errors import UserError
from jspec.io import gguf_loader, hf_loader, weights
from jspec.io.tokenizer import Tokenizer


@dataclasses.dataclass
class LoadedModel:
    name: str
    cfg: ModelConfig
    graphdef: nnx.GraphDef
    params: nnx.State
    tokenizer: Tokenizer
    dtype: str
    chat: bool

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.tokenizer.eos_token_ids) | set(self.cfg.eos_token_ids)))


def resolve_source(name_or_path: str, install_missing: bool = True,
                   progress: bool = True) -> tuple[pathlib.Path, str, bool]:
    """(path, display name, chat) for a preset name, a .gguf file or an HF checkpoint directory."""
    path = pathlib.Path(name_or_path).expanduser()
    if path.suffix == ".gguf" or path.is_dir():
        if not path.exists():
            raise UserError(f"model path does not exist: {path}")
        return path, str(path), True
    if "/" in name_or_path or name_or_path.endswith((".gguf", ".json")):
        raise UserError(f"model path does not exist: {path}")
    preset = model_preset(name_or_path)  # raises a UserError listing known names
    from jspec import assets  # deferred: pulls in pip plumbing only when a preset is used

    return assets.model_gguf(preset.asset, install_missing=install_missing, progress=progress), preset.name, preset.chat


def load_model(name_or_path: str, dtype: str = "float32", progress: bool = True,
               install_missing: bool = True) -> LoadedModel:
    weights.numpy_dtype(dtype)  # validate early
    path, name, chat = resolve_source(name_or_path, install_missing, progress)
    if path.is_dir():
        cfg, tensors = hf_loader.load_hf_dir(path)
        tokenizer = Tokenizer.from_hf_dir(path)
    else:
        cfg, tensors = _load_gguf_cached(path, dtype, progress)
        tokenizer = Tokenizer.from_gguf(path)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise UserError(f"{path}: tokenizer has {tokenizer.vocab_size} tokens but the model only {cfg.vocab_size}")
    graphdef, params = weights.build_params(cfg, tensors, dtype, str(path))
    return LoadedModel(name=name, cfg=cfg, graphdef=graphdef, params=params, tokenizer=tokenizer, dtype=dtype,
                       chat=chat and tokenizer.chat_template is not None)


def _load_gguf_cached(path: pathlib.Path, dtype: str, progress: bool):
    stat = path.stat()
    key = f"{path.name}:{stat.st_size}:{int(stat.st_mtime)}"
    cache_path = path.with_name(path.name + f".{dtype}.safetensors")
    cached = weights.load_cache(cache_path, key)
    if cached is not None:
        cfg_dict, tensors = cached
        return ModelConfig.from_dict(cfg_dict), tensors
    reader = gguf_loader.open_gguf(path)
    cfg = gguf_loader.config_from_gguf(reader, str(path))
    t0 = time.perf_counter()
    tensors = gguf_loader.load_gguf_tensors(reader, cfg, progress)
    weights.check_tensors(cfg, tensors, str(path))
    try:
        weights.save_cache(cache_path, _config_dict(cfg), tensors, dtype, key)
    except OSError:
        pass  # a read-only model folder only costs the dequantization next time
    if progress:
        print(f"jspec: dequantized {path.name} in {time.perf_counter() - t0:.1f}s (cached as {dtype})",
              file=sys.stderr)
    return cfg, tensors


def _config_dict(cfg: ModelConfig) -> dict:
    d = dataclasses.asdict(cfg)
    d["eos_token_ids"] = list(cfg.eos_token_ids)
    return d
