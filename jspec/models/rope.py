"""Rotary position embeddings (half-split / NEOX layout, as HF) with linear, Llama-3 and YaRN scaling.

GGUF `llama` checkpoints store q/k rows permuted for interleaved RoPE; the loader un-permutes them, so one layout serves
every family.
"""

import math

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from jspec.config import RopeConfig


def inverse_frequencies(rope: RopeConfig, head_dim: int) -> tuple[np.ndarray, float]:
    """Per-pair inverse frequencies `[head_dim // 2]` and the attention scaling applied to cos/sin."""
    inv_freq = 1.0 / (rope.theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    scale = 1.0
    if rope.scaling == "linear":
        inv_freq = inv_freq / rope.factor
    elif rope.scaling == "llama3":
        inv_freq = _llama3_scaling(inv_freq, rope)
    elif rope.scaling == "yarn":
        inv_freq, scale = _yarn_scaling(rope, head_dim)
    if rope.freq_factors is not None:
        inv_freq = inv_freq / np.asarray(rope.freq_factors, np.float64)
    return inv_freq.astype(np.float32), scale


def _llama3_scaling(inv_freq: np.ndarray, rope: RopeConfig) -> np.ndarray:
    # Long wavelengths are divided by `factor`, short ones kept, the band between interpolated smoothly.
    low_wavelen = rope.original_max_position / rope.low_freq_factor
    high_wavelen = rope.original_max_position / rope.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_wavelen, inv_freq / rope.factor, inv_freq)
    smooth = ((rope.original_max_position / wavelen - rope.low_freq_factor)
              / (rope.high_freq_factor - rope.low_freq_factor))
    smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, smoothed, scaled)


def _yarn_scaling(rope: RopeConfig, head_dim: int) -> tuple[np.ndarray, float]:
    base, factor, dim = rope.theta, rope.factor, head_dim
    if rope.attention_factor is not None:
        scale = rope.attention_factor
    else:
        scale = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0

    def correction_dim(num_rotations: float) -> float:
        return dim * math.log(rope.original_max_position / (num_rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(rope.beta_fast)), 0)
    high = min(math.ceil(correction_dim(rope.beta_slow)), dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolation_weight = 1 - ramp
    inv_freq = interpolation * (1 - extrapolation_weight) + extrapolation * extrapolation_weight
    return inv_freq, scale


def rope_tables(
    positions: Int[Array, "B T"], inv_freq: np.ndarray, scale: float
) -> tuple[Float[Array, "B T half"], Float[Array, "B T half"]]:
    angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)
    return jnp.cos(angles) * scale, jnp.sin(angles) * scale


def apply_rope(
    x: Float[Array, "B T H D"], cos: Float[Array, "B T half"], sin: Float[Array, "B T half"]
) -> Float[Array, "B T H D"]:
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)
