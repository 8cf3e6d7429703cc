"""Token Recycling adjacency update: fused streaming top-k (Pallas, GPU and TPU) + deterministic row scatter."""

from pallas_kernels.adjacency_update.api import adjacency_update, kernel_supported, topk_indices
from pallas_kernels.adjacency_update.reference import adjacency_update_reference, scatter_rows, topk_reference

__all__ = ["adjacency_update", "adjacency_update_reference", "kernel_supported", "scatter_rows", "topk_indices",
           "topk_reference"]
