"""Frozen configuration dataclasses and the YAML presets under configs/.

`ModelConfig` describes a target decoder (llama / qwen2 / qwen3 families); `DecodeConfig` holds decoding defaults.
Presets are read from `configs/models/*.yaml` and `configs/decoding/*.yaml` so that benchmarks and notebooks share one
source of truth.
"""

import dataclasses
import functools
import pathlib
from typing import Any

import yaml

from jspec.errors import UserError

FAMILIES = ("llama", "qwen2", "qwen3")
ROPE_SCALINGS = ("none", "linear", "llama3", "yarn")


def configs_dir() -> pathlib.Path:
    """The repo's configs/ folder (also shipped next to the package when installed non-editable)."""
    here = pathlib.Path(__file__).resolve().parent
    for cand in (here.parent / "configs", here / "configs"):
        if cand.is_dir():
            return cand
    raise UserError(f"configs/ folder not found next to {here}")


@dataclasses.dataclass(frozen=True)
class RopeConfig:
    theta: float = 10000.0
    scaling: str = "none"  # one of ROPE_SCALINGS
    factor: float = 1.0
    # llama3 scaling
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int = 8192
    # yarn scaling
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None  # None: 0.1 * ln(factor) + 1 as in the YaRN paper
    # Per-pair divisors of the inverse frequencies (GGUF `rope_freqs`, llama.cpp's encoding of Llama-3 scaling).
    freq_factors: tuple[float, ...] | None = None

    def __post_init__(self):
        if self.scaling not in ROPE_SCALINGS:
            raise UserError(f"unknown RoPE scaling {self.scaling!r}; expected one of {ROPE_SCALINGS}")


class AttentionShape:
    """q/k/v widths and the GQA check, shared by every config that has num_heads / num_kv_heads / head_dim."""

    num_heads: int
    num_kv_heads: int
    head_dim: int

    def check_heads(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise UserError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim


@dataclasses.dataclass(frozen=True)
class ModelConfig(AttentionShape):
    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope: RopeConfig = RopeConfig()
    max_position: int = 32768
    tie_embeddings: bool = False
    attention_bias: bool = False  # q/k/v biases (qwen2)
    qk_norm: bool = False  # per-head RMSNorm on q and k (qwen3)
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise UserError(f"unknown model family {self.family!r}; expected one of {FAMILIES}")
        self.check_heads()
        if self.head_dim % 2:
            raise UserError(f"head_dim must be even for RoPE, got {self.head_dim}")

    def num_params(self) -> int:
        d, f, v = self.hidden_size, self.intermediate_size, self.vocab_size
        attn = d * (self.q_size + 2 * self.kv_size) + self.q_size * d
        if self.attention_bias:
            attn += self.q_size + 2 * self.kv_size
        layer = attn + 3 * d * f + 2 * d + (2 * self.head_dim if self.qk_norm else 0)
        return v * d * (1 if self.tie_embeddings else 2) + self.num_layers * layer + d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelConfig":
        d = dict(d)
        rope = dict(d.pop("rope", {}))
        if rope.get("freq_factors") is not None:
            rope["freq_factors"] = tuple(rope["freq_factors"])
        rope = RopeConfig(**rope)
        if "eos_token_ids" in d:
            d["eos_token_ids"] = tuple(d["eos_token_ids"])
        return cls(rope=rope, **d)


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    max_cache_len: int = 2048


@dataclasses.dataclass(frozen=True)
class ModelPreset:
    """A named model: where its weights come from and the architecture they must have."""

    name: str
    asset: str  # key in jspec/assets/manifest.yaml
    description: str
    chat: bool
    config: ModelConfig
    default_drafter: str | None = None  # for draft_model: a preset name or truncate:N
    eagle3_drafter: str | None = None  # for eagle3 / eagle3_pruned / graft: a drafter in jspec/weights/ or a path


@functools.cache
def model_presets() -> dict[str, ModelPreset]:
    presets = {}
    for path in sorted((configs_dir() / "models").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        presets[raw["name"]] = ModelPreset(
            name=raw["name"],
            asset=raw["asset"],
            description=raw.get("description", ""),
            chat=bool(raw.get("chat", True)),
            default_drafter=raw.get("default_drafter"),
            eagle3_drafter=raw.get("eagle3_drafter"),
            config=ModelConfig.from_dict(raw["config"]),
        )
    return presets


def model_preset(name: str) -> ModelPreset:
    presets = model_presets()
    if name not in presets:
        raise UserError(f"unknown model {name!r}; known models: {', '.join(sorted(presets))} (or a path to a "
                        ".gguf file or an HF checkpoint directory)")
    return presets[name]


def decode_defaults() -> DecodeConfig:
    raw = yaml.safe_load((configs_dir() / "decoding" / "default.yaml").read_text())
    return DecodeConfig(**raw)
