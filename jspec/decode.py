"""Vanilla generation: one jitted prefill, then one jitted `lax.while_loop` until every row stops.

Rows of a batch have their own prompt lengths and stop independently (EOS, max new tokens, cache full); shapes never
depend on data, and the cache is donated so XLA updates it in place.
"""

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jaxtyping import Array, Bool, Int

from jspec.errors import UserError
from jspec.models.cache import KVCache, causal_block_mask
from jspec.models.decoder import Decoder
from jspec.sampling import Sampling, select
from jspec.static_jit import jit_hashing_once


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class DecodeState:
    cache: KVCache
    last_token: Int[Array, " B"]  # generated but not yet fed to the model
    out_tokens: Int[Array, "B N"]
    num_generated: Int[Array, " B"]
    done: Bool[Array, " B"]
    step: Int[Array, ""]
    rng: jax.Array


@dataclasses.dataclass(frozen=True)
class GenerationResult:
    tokens: list[list[int]]  # per row, new tokens only (EOS included when hit)
    steps: list[int]  # target forwards that produced tokens, prefill included
    prefill_seconds: float
    decode_seconds: float


def pad_prompts(prompts: list[list[int]], max_cache_len: int, bucket: int = 64, width: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad to a bucketed width (fewer recompiles), or to `width`, and check every prompt fits the cache."""
    if not prompts:
        raise UserError("no prompts given")
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise UserError(f"prompt {i} is empty")
        if len(p) >= max_cache_len:
            raise UserError(f"prompt {i} has {len(p)} tokens but the cache holds {max_cache_len}: "
                            "raise --max-cache-len or shorten the prompt")
    if width is None:
        width = min(-(-max(map(len, prompts)) // bucket) * bucket, max_cache_len)
    elif width < max(map(len, prompts)):
        raise UserError(f"pad width {width} is shorter than the longest prompt ({max(map(len, prompts))} tokens)")
    tokens = np.zeros((len(prompts), width), np.int32)
    for i, p in enumerate(prompts):
        tokens[i, : len(p)] = p
    return tokens, np.array([len(p) for p in prompts], np.int32)


def is_eos(tokens: Int[Array, "..."], eos_ids: tuple[int, ...]) -> Bool[Array, "..."]:
    if not eos_ids:
        return jnp.zeros(tokens.shape, bool)
    return jnp.isin(tokens, jnp.asarray(eos_ids, jnp.int32))


def prefill(model: Decoder, tokens: Int[Array, "B T"], prompt_lens: Int[Array, " B"], cache: KVCache,
            sampling: Sampling, rng: jax.Array, taps: tuple[int, ...] = ()):
    """Writes the prompts' K/V and picks each row's first new token from its last prompt position."""
    b, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    valid = positions < prompt_lens[:, None]
    mask = causal_block_mask(jnp.zeros((b,), jnp.int32), valid)
    hidden, cache, tapped = model(tokens, positions, cache, mask, taps)
    last = jnp.take_along_axis(hidden, (prompt_lens - 1)[:, None, None], axis=1)[:, 0]
    first = select(model.logits(last), sampling, rng)
    cache = dataclasses.replace(cache, lengths=prompt_lens)
    return first, cache, hidden, tapped


def decode_step(model: Decoder, state: DecodeState, sampling: Sampling, eos_ids: tuple[int, ...]) -> DecodeState:
    cache = state.cache
    active = ~state.done
    positions = cache.lengths[:, None]
    mask = causal_block_mask(cache.lengths, active[:, None])
    hidden, cache, _ = model(state.last_token[:, None], positions, cache, mask)
    key = jax.random.fold_in(state.rng, state.step)
    token = select(model.logits(hidden[:, 0]), sampling, key)
    lengths = cache.lengths + active.astype(jnp.int32)
    rows = jnp.arange(token.shape[0])
    out_tokens = state.out_tokens.at[rows, jnp.where(active, state.num_generated, state.out_tokens.shape[1])].set(
        token, mode="drop")
    num_generated = state.num_generated + active.astype(jnp.int32)
    done = state.done | (active & (is_eos(token, eos_ids) | (num_generated >= state.out_tokens.shape[1])
                                   | (lengths >= cache.max_len)))
    return DecodeState(cache=dataclasses.replace(cache, lengths=lengths), last_token=jnp.where(active, token,
                       state.last_token), out_tokens=out_tokens, num_generated=num_generated, done=done,
                       step=state.step + 1, rng=state.rng)


@jit_hashing_once(static_argnames=("graphdef", "sampling", "max_new_tokens", "eos_ids", "max_cache_len",
                                  "cache_dtype"), hashed_argnames=("graphdef",))
def _prefill_jit(graphdef, params, tokens, prompt_lens, rng, *, sampling, max_new_tokens, eos_ids, max_cache_len,
                 cache_dtype):
    model = nnx.merge(graphdef, params)
    # One guard slot: a finished row at max_cache_len tokens still writes its (ignored) next token in bounds.
    cache = KVCache.init(model.cfg, tokens.shape[0], max_cache_len, cache_dtype, guard=1)
    first, cache, _, _ = prefill(model, tokens, prompt_lens, cache, sampling, jax.random.fold_in(rng, 2**31 - 1))
    b = tokens.shape[0]
    out = jnp.zeros((b, max_new_tokens), jnp.int32).at[:, 0].set(first)
    done = is_eos(first, eos_ids) | (max_new_tokens <= 1) | (prompt_lens >= max_cache_len)
    return DecodeState(cache=cache, last_token=first, out_tokens=out, num_generated=jnp.ones((b,), jnp.int32),
                       done=done, step=jnp.zeros((), jnp.int32), rng=rng)


@jit_hashing_once(static_argnames=("graphdef", "sampling", "eos_ids"), hashed_argnames=("graphdef",),
                  donate_argnames=("state",))
def _decode_jit(graphdef, params, state: DecodeState, *, sampling, eos_ids):
    model = nnx.merge(graphdef, params)
    return jax.lax.while_loop(lambda s: ~jnp.all(s.done),
                              lambda s: decode_step(model, s, sampling, eos_ids), state)


def generate(graphdef: nnx.GraphDef, params: nnx.State, prompts: list[list[int]], *, max_new_tokens: int,
             sampling: Sampling = Sampling(), eos_ids: tuple[int, ...] = (), seed: int = 0,
             max_cache_len: int = 2048, cache_dtype=None, pad_to: int | None = None) -> GenerationResult:
    """Vanilla autoregressive decoding of a batch of token-id prompts (one target forward per new token)."""
    if max_new_tokens < 1:
        raise UserError(f"max new tokens must be >= 1, got {max_new_tokens}")
    tokens, lens = pad_prompts(prompts, max_cache_len, width=pad_to)
    if cache_dtype is None:
        cache_dtype = jax.tree.leaves(params)[0].dtype
    kwargs = dict(sampling=sampling, eos_ids=tuple(eos_ids))
    t0 = time.perf_counter()
    state = _prefill_jit(graphdef, params, jnp.asarray(tokens), jnp.asarray(lens), jax.random.key(seed),
                         max_new_tokens=max_new_tokens, max_cache_len=max_cache_len, cache_dtype=cache_dtype, **kwargs)
    jax.block_until_ready(state)
    t1 = time.perf_counter()
    state = _decode_jit(graphdef, params, state, **kwargs)
    out, n = jax.device_get((state.out_tokens, state.num_generated))
    t2 = time.perf_counter()
    rows = [out[i, : n[i]].tolist() for i in range(len(prompts))]
    return GenerationResult(tokens=rows, steps=[len(r) for r in rows], prefill_seconds=t1 - t0, decode_seconds=t2 - t1)
