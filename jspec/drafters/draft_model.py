"""A small LM of the same tokenizer as drafter: a separate preset (Qwen2.5-Coder-0.5B for the 1.5B) or a
layer-truncated copy of the target (the same-tokenizer drafter available for SmolLM2, which has no smaller sibling)."""

import dataclasses

import jax.numpy as jnp
from flax import nnx

from jspec.errors import UserError
from jspec.models.decoder import Decoder
from jspec.models.loading import LoadedModel, load_model


def truncated_copy(target: LoadedModel, num_layers: int) -> tuple[nnx.GraphDef, nnx.State]:
    """The target's first `num_layers` layers + its final norm and LM head, sharing the target's arrays."""
    if not 1 <= num_layers <= target.cfg.num_layers:
        raise UserError(f"truncated drafter needs 1..{target.cfg.num_layers} layers, got {num_layers}")
    cfg = dataclasses.replace(target.cfg, num_layers=num_layers)
    dtype = jnp.dtype(jnp.float32 if target.dtype == "float32" else jnp.bfloat16)
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Decoder(cfg, dtype=dtype, rngs=nnx.Rngs(0))))
    pure = nnx.to_pure_dict(target.params)
    pure["layers"] = {i: pure["layers"][i] for i in range(num_layers)}
    nnx.replace_by_pure_dict(abstract, pure)
    return graphdef, abstract


def load_drafter(spec: str, target: LoadedModel) -> tuple[nnx.GraphDef, nnx.State]:
    """`spec` is `truncate:N` or a model name/path; the drafter must share the target's vocabulary."""
    if spec.startswith("truncate:"):
        try:
            layers = int(spec.split(":", 1)[1])
        except ValueError:
            raise UserError(f"--drafter {spec!r}: expected truncate:<number of layers>") from None
        return truncated_copy(target, layers)
    drafter = load_model(spec, dtype=target.dtype, progress=False)
    if drafter.cfg.vocab_size != target.cfg.vocab_size:
        raise UserError(f"vocab mismatch between drafter {drafter.name} ({drafter.cfg.vocab_size} tokens) and target "
                        f"{target.name} ({target.cfg.vocab_size} tokens)")
    return drafter.graphdef, drafter.params
