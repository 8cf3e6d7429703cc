"""`tree_attention`: one attention call for prefill, decode and tree verification, on the best kernel available.

Which implementation runs (decided at trace time):
- `kernel` argument if given: "reference", "tpu", "gpu" or "mosaic";
- else the environment variable JSPEC_ATTENTION: "reference", "pallas" (the kernel of the default backend), or
  "mosaic" (GPU: the Mosaic GPU kernel of gpu_mosaic.py instead of the default Triton-lowered one, which measured
  faster on the H200 at 2K and 8K context and for decode: docs/results/2026-11-30-session7-h200.md);
- else the kernel of `jax.default_backend()` ("tpu" -> tpu.py, "gpu" -> gpu.py) and the reference anywhere else.
On GPUs, tree verification of 32..128 new tokens runs the kernel's "heads" layout and anything shorter the "packed"
one; JSPEC_TREE_LAYOUT=packed|heads forces one (see `gpu.default_layout`), and JSPEC_TREE_TUNING overrides the
Triton kernel's tuning for tree verification (see `gpu.env_tuning`).
`interpret` runs the chosen kernel in Pallas interpret mode (CPU tests): True, or for the TPU kernel a
`pltpu.InterpretParams`.

Shapes a kernel does not take fall back to the reference with a warning (see each kernel's `unsupported`):
- both kernels: query heads not a multiple of kv heads;
- TPU: cache length not a multiple of 128 (head dims that are not a multiple of 128 run, but zero-pad the cache: a
  copy of it per call);
- GPU: head dim not a power of two >= 16, cache length not a multiple of 16.
"""

import os
import warnings

import jax
from jaxtyping import Array, Bool, Float, Int

from pallas_kernels.tree_attention import gpu, gpu_mosaic, tpu
from pallas_kernels.tree_attention.reference import tree_attention_reference

_KERNELS = {"tpu": (tpu.tree_attention_tpu, tpu.unsupported), "gpu": (gpu.tree_attention_gpu, gpu.unsupported),
            "mosaic": (gpu_mosaic.tree_attention_mosaic, gpu_mosaic.unsupported)}
_READS_LAYER_IN_PLACE = ("gpu", "mosaic")


def choose_kernel(kernel: str | None = None, interpret: bool = False) -> str:
    """"reference", "tpu", "gpu" or "mosaic", from the argument, JSPEC_ATTENTION, or the default backend.
    A JSPEC_ATTENTION kernel for another backend is an error unless it will run in interpret mode."""
    choice = kernel or os.environ.get("JSPEC_ATTENTION", "auto")
    backend = jax.default_backend()
    if choice == "pallas":
        if backend not in _KERNELS:
            raise ValueError(f"JSPEC_ATTENTION=pallas: no Pallas kernel for backend {backend!r}")
        return backend
    if choice == "auto":
        return backend if backend in _KERNELS else "reference"
    if choice not in ("reference", *_KERNELS):
        raise ValueError(f"unknown attention kernel {choice!r} (reference, pallas, tpu, gpu or mosaic)")
    needs = "gpu" if choice in ("gpu", "mosaic") else choice
    if kernel is None and not interpret and choice != "reference" and needs != backend:
        raise ValueError(f"JSPEC_ATTENTION={choice}: that kernel needs a {needs} backend, this one is {backend} "
                         "(use reference or pallas)")
    return choice


def tree_attention(q: Float[Array, "B T H D"], k: Float[Array, "*L B S K D"], v: Float[Array, "*L B S K D"],
                   start: Int[Array, " B"], block: Bool[Array, "B T T"], *, sm_scale: float | None = None,
                   layer: int | None = None, kernel: str | None = None, interpret=False,
                   **tuning) -> Float[Array, "B T H D"]:
    """GQA attention of T new tokens per row over a KV cache that already holds them at slots start..start+T-1.

    Query i of row b sees slot s iff `s < start[b]` (committed prefix) or `block[b, i, s - start[b]]` for
    `start[b] <= s < start[b] + T`; slots from `start[b] + T` on are never read. Query head h uses kv head
    `h // (H // K)`. Softmax in f32, output in q's dtype; a query that sees nothing gets zeros. `tuning` goes to the
    kernel (block_k, and num_splits / num_warps / num_stages on GPU).

    `layer`: `k` and `v` are a whole [L, B, S, K, D] cache of which this layer is used. The GPU kernels then read it
    in place; elsewhere it is sliced (XLA fuses the slice into the reference; the TPU kernel gets a copy).
    """
    name = choose_kernel(kernel, interpret=bool(interpret))
    if layer is not None and (name not in _READS_LAYER_IN_PLACE or k.dtype != q.dtype):
        k, v, layer = k[layer].astype(q.dtype), v[layer].astype(q.dtype), None
    if name == "reference":
        return tree_attention_reference(q, k, v, start, block, sm_scale=sm_scale)
    fn, unsupported = _KERNELS[name]
    if reason := unsupported(q, k if layer is None else jax.ShapeDtypeStruct(k.shape[1:], k.dtype)):
        warnings.warn(f"tree_attention: {name} kernel falls back to the reference: {reason}", stacklevel=2)
        k, v = (k, v) if layer is None else (k[layer], v[layer])
        return tree_attention_reference(q, k.astype(q.dtype), v.astype(q.dtype), start, block, sm_scale=sm_scale)
    if name == "gpu":  # environment read here, not inside the kernel's jit cache
        tuning = {"layout": gpu.default_layout(q.shape[1])} | gpu.env_tuning(q.shape[1]) | tuning
    if layer is not None:
        tuning["layer"] = layer
    return fn(q, k, v, start, block, sm_scale=sm_scale, interpret=interpret, **tuning)
