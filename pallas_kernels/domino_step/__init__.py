"""Domino correction step: fused low-rank correction + vocabulary argmax (Pallas, GPU and TPU) inside the GRU loop,
and the candidate-restricted loop with one fused call per draft (GPU)."""

from pallas_kernels.domino_step.api import correction_argmax, domino_draft, domino_draft_candidates
from pallas_kernels.domino_step.reference import (correction_argmax_reference, correction_logits,
                                                  domino_draft_reference, gru_step, input_gates)

__all__ = ["correction_argmax", "correction_argmax_reference", "correction_logits", "domino_draft",
           "domino_draft_candidates",
           "domino_draft_reference", "gru_step", "input_gates"]
