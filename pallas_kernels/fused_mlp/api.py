"""When to use the fused decode MLP: on GPU, for at most 16 rows, unless JSPEC_FUSED_MLP=0.

Block sizes come from TUNED (measured on an H200, see docs/results/) or JSPEC_FUSED_MLP_CONFIG="bf,bk,bd,warps,stages".
"""

import os

import jax

from pallas_kernels.fused_mlp.kernel import ROWS, fused_mlp

# (hidden, ffn) -> (block_f, block_k, block_d, num_warps, num_stages)
TUNED: dict[tuple[int, int], tuple[int, int, int, int, int]] = {}
DEFAULT = (32, 256, 256, 4, 3)


def block_config(hidden: int, ffn: int) -> tuple[int, int, int, int, int]:
    env = os.environ.get("JSPEC_FUSED_MLP_CONFIG")
    if env:
        return tuple(int(v) for v in env.split(","))  # type: ignore[return-value]
    return TUNED.get((hidden, ffn), DEFAULT)


def usable(rows: int, hidden: int, ffn: int) -> bool:
    if os.environ.get("JSPEC_FUSED_MLP", "1") == "0" or jax.default_backend() != "gpu" or rows > ROWS:
        return False
    block_f, block_k, block_d, _, _ = block_config(hidden, ffn)
    return ffn % block_f == 0 and hidden % block_k == 0 and hidden % block_d == 0


def decode_mlp(x, gate_up, down):
    block_f, block_k, block_d, warps, stages = block_config(x.shape[-1], down.shape[1])
    return fused_mlp(x, gate_up, down, block_f=block_f, block_k=block_k, block_d=block_d, num_warps=warps,
                     num_stages=stages)
