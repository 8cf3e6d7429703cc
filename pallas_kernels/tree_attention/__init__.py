"""Tree attention (prefill, decode and tree verification in one call): pure-JAX reference, TPU and GPU kernels."""

from pallas_kernels.tree_attention.api import choose_kernel, tree_attention
from pallas_kernels.tree_attention.reference import tree_attention_reference

__all__ = ["choose_kernel", "tree_attention", "tree_attention_reference"]
