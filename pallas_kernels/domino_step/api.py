"""Domino step entry points: the fused correction + argmax kernel for the platform (or the reference), and the whole
greedy/sampled draft loop around it.

`platform` picks the kernel flavour ("gpu", "tpu"; default: the default backend; anything else, e.g. "reference" or
"cpu", runs the pure-JAX reference). `interpret` runs the chosen kernel on the host (CPU tests): True, or for the TPU
kernel a `pltpu.InterpretParams`.
"""

import jax
from jax.experimental.pallas import tpu as pltpu
from jaxtyping import Array, Float, Int

from pallas_kernels.domino_step import gpu, gpu_block, gpu_loop, gpu_select, tpu
from pallas_kernels.domino_step.reference import (Choose, candidate_inputs, correction_argmax_reference,
                                                  domino_draft_candidates_reference, domino_draft_reference,
                                                  draft_loop, greedy)

GPU_PLATFORMS = ("gpu", "cuda", "rocm")
SELECT_CHUNK = 64  # chunk size of the exact selection kernel, as reference.chunked_top_k's


def correction_argmax(pre: Float[Array, "B R"], w2: Float[Array, "V R"], base: Float[Array, "B V"], *,
                      platform: str | None = None, interpret: bool | pltpu.InterpretParams = False,
                      **tuning) -> Int[Array, " B"]:
    """`argmax(base + W2 · SiLU(pre))` per row; `tuning` goes to the kernel (block_v, and splits / num_warps on GPU).

    Shapes a kernel does not take (GPU: rank not a power of two >= 16) run the reference.
    """
    platform = platform or jax.default_backend()
    if platform in GPU_PLATFORMS and gpu.unsupported(pre, w2) is None:
        return gpu.correction_argmax_gpu(pre, w2, base, interpret=bool(interpret), **tuning)
    if platform == "tpu":
        return tpu.correction_argmax_tpu(pre, w2, base, interpret=interpret, **tuning)
    return correction_argmax_reference(pre, w2, base)


def domino_draft(base: Float[Array, "B N V"], z_part: Float[Array, "B N R"], bonus: Int[Array, " B"],
                 embed: Float[Array, "V H"], w_ih: Float[Array, "G3 H"], w_hh: Float[Array, "G3 G"],
                 w_s: Float[Array, "R G"], w2: Float[Array, "V R"], *, prefix_len: int, choose: Choose | None = None,
                 table: Float[Array, "V G3"] | None = None, platform: str | None = None,
                 interpret: bool | pltpu.InterpretParams = False, **tuning) -> Int[Array, "B N"]:
    """Domino drafts of a block (reference.py states the loop). Greedy (`choose=None`) fuses each corrected step into
    `correction_argmax`; sampled drafting needs the full corrected logits, so it runs the reference step with `choose`.
    """
    if choose is not None:
        return domino_draft_reference(base, z_part, bonus, embed, w_ih, w_hh, w_s, w2, prefix_len=prefix_len,
                                      choose=choose, table=table)
    return draft_loop(base, z_part, bonus, embed, w_ih, w_hh, w_s, w2, prefix_len=prefix_len,
                      corrected_choice=lambda pre, base_i, i: correction_argmax(
                          pre, w2, base_i, platform=platform, interpret=interpret, **tuning),
                      plain_choice=greedy, table=table)


def domino_draft_candidates(base: Float[Array, "B N V"], z_part: Float[Array, "B N R"], bonus: Int[Array, " B"],
                            embed: Float[Array, "V H"], w_ih: Float[Array, "G3 H"], w_hh: Float[Array, "G3 G"],
                            w_s: Float[Array, "R G"], w2: Float[Array, "V R"], *, prefix_len: int, candidates: int,
                            choose: Choose | None = None, table: Float[Array, "V G3"] | None = None,
                            platform: str | None = None, fused: str | None = None,
                            interpret: bool = False, chunk: int = 0, select_kernel: bool = True,
                            stop: float = 0.0) -> Int[Array, "B N"]:
    """Domino drafts among each row's `candidates` best base tokens (reference.domino_draft_candidates; `chunk` > 0:
    approximate candidates, reference.chunk_max_top_k). The GPU kernel paths also select the candidates with
    gpu_select.py's sort-free kernel unless `select_kernel` is False (XLA's sorts, as the reference). `stop` > 0
    (greedy): the head stops once the running confidence of the drafts falls below it
    (reference.stopping_candidate_loop); the block kernel then ends its loop early, `fused="step"` runs the XLA loop.

    The XLA loop by default. On GPUs, greedy drafting with a GRU input table can instead run `fused="step"`, one
    fused kernel per draft (gpu_loop.py; on an H200 2x slower than the XLA loop: 414 vs 215 µs per 16-token block at
    k = 64, docs/results/2026-11-30-kernels-draft-model-h200.md), or `fused="block"`, the whole block in one
    persistent kernel (gpu_block.py, batch 1; 114 vs 230 µs standalone, 85 µs in the decode loop,
    docs/results/2026-11-30-session10-h200.md). Other cases, and shapes a kernel does not take, run the XLA loop.
    """
    if fused not in (None, "step", "block"):
        raise ValueError(f"fused must be None, 'step' or 'block', not {fused!r}")
    if not 0.0 <= stop < 1.0:
        raise ValueError(f"the head's stop threshold must be in [0, 1), got {stop}")
    if stop and choose is not None:
        raise ValueError("an adaptive head stop needs greedy drafting (its confidence is the greedy choice's)")
    platform = platform or jax.default_backend()
    b, k, rank, gru = base.shape[0], candidates, w_s.shape[0], w_hh.shape[1]
    usable = fused is not None and choose is None and table is not None and platform in GPU_PLATFORMS
    if usable and fused == "block":
        sms = gpu_block.num_sms()
        if gpu_block.unsupported(b, k, rank, gru, sms) is None:
            cand_base, cand, cand_w2 = _gpu_candidate_inputs(base, w2, candidates, chunk, select_kernel, interpret)
            drafts, _ = gpu_block.candidate_block_gpu(cand_base, cand, cand_w2, z_part, bonus, table, w_hh, w_s,
                                                      prefix_len=prefix_len, sms=sms, persistent=not interpret,
                                                      stop=stop, interpret=interpret)
            return drafts
    if usable and fused == "step" and not stop and gpu_loop.unsupported(b, k, rank, gru) is None:
        cand_base, cand, cand_w2 = _gpu_candidate_inputs(base, w2, candidates, chunk, select_kernel, interpret)
        return gpu_loop.candidate_loop_gpu(cand_base, cand, cand_w2, z_part, bonus, table, w_hh, w_s,
                                           prefix_len=prefix_len, interpret=interpret)
    return domino_draft_candidates_reference(base, z_part, bonus, embed, w_ih, w_hh, w_s, w2, prefix_len=prefix_len,
                                             candidates=candidates, choose=choose or greedy, table=table,
                                             chunk=chunk, stop=stop)


def _gpu_candidate_inputs(base: Float[Array, "B N V"], w2: Float[Array, "V R"], candidates: int, chunk: int,
                          select_kernel: bool, interpret: bool):
    """reference.candidate_inputs, with the selection in gpu_select.py's kernel when it takes the shapes (its lists
    are in id order, not best first: the same sets)."""
    b, n, v = base.shape
    size = chunk or SELECT_CHUNK
    if not select_kernel or gpu_select.unsupported(v, candidates, size, w2.shape[1]) is not None:
        return candidate_inputs(base, w2, candidates, chunk)
    values, ids, cand_w2 = gpu_select.select_candidates_gpu(base.reshape(b * n, v), w2, k=candidates, chunk=size,
                                                            exact=not chunk, interpret=interpret)
    k = candidates
    return values.reshape(b, n, k), ids.reshape(b, n, k), cand_w2.reshape(b, n, k, w2.shape[1])
