"""Decoding methods by name. Each is a frozen dataclass (static config) with a state pytree; see methods/base.py."""

from typing import Any

from jspec.errors import UserError
from jspec.methods.base import Method
from jspec.methods.dflash import DFlash, Domino
from jspec.methods.draft_model import DraftModel
from jspec.methods.eagle3 import Eagle3
from jspec.methods.graft import Eagle3Pruned, Graft
from jspec.methods.graft_tail import GraftTail
from jspec.methods.pld import PromptLookup
from jspec.methods.token_recycling import TokenRecycling

EAGLE3_METHODS = ("eagle3", "eagle3_pruned", "graft")  # an EAGLE-3 drafter (--drafter / --eagle3-drafter)


def available() -> dict[str, type[Method]]:
    """Every method by name."""
    return {"vanilla": Method, "pld": PromptLookup, "draft_model": DraftModel, "token_recycling": TokenRecycling,
            "eagle3": Eagle3, "eagle3_pruned": Eagle3Pruned, "graft": Graft, "dflash": DFlash, "domino": Domino,
            "graft_tail": GraftTail}


def build(name: str, target, drafter: str | None = None, **options) -> tuple[Method, Any]:
    """(method, method params) for a loaded target; `drafter` overrides the preset's default drafter."""
    if name == "draft_model":
        from jspec.config import model_presets
        from jspec.drafters.draft_model import load_drafter

        preset = model_presets().get(target.name)
        spec = drafter or (preset.default_drafter if preset else None)
        if not spec:
            raise UserError("draft_model needs --drafter (a model name/path, or truncate:N for a layer-truncated "
                            "copy of the target)")
        graphdef, params = load_drafter(spec, target)
        return get_method(name, drafter=graphdef, **options), params
    if name in EAGLE3_METHODS:
        from flax import nnx

        from jspec.io.eagle3_checkpoint import load_eagle3_checkpoint

        from jspec.config import model_presets
        from jspec.drafters.bundled import resolve_drafter

        preset = model_presets().get(target.name)
        drafter = drafter or (preset.eagle3_drafter if preset else None)
        if not drafter:
            raise UserError(f"{name} needs an EAGLE-3 checkpoint directory (config.json + model.safetensors): "
                            "--drafter for generate and calibrate, --eagle3-drafter for bench")
        graphdef, params = nnx.split(load_eagle3_checkpoint(resolve_drafter(drafter), target.cfg, target.dtype))
        return eagle3_method(target, graphdef, params, name=name, **options)
    if name in ("dflash", "domino", "graft_tail"):
        from jspec.io.dflash_checkpoint import load_dflash_checkpoint

        if not drafter:
            raise UserError(f"{name} needs a {'Domino' if name == 'domino' else 'DFlash or Domino'} checkpoint "
                            "directory (config.json + *.safetensors): --drafter")
        return dflash_method(name, target, load_dflash_checkpoint(drafter, target.cfg, target.dtype), **options)
    if drafter is not None:
        raise UserError(f"method {name!r} takes no drafter")
    if name == "token_recycling":
        options = {"vocab_size": target.cfg.vocab_size, **options}
    return get_method(name, **options), ()


def eagle3_method(target, graphdef, drafter_params, name: str = "eagle3", **options) -> tuple[Method, Any]:
    """An eagle3 / eagle3_pruned / graft method around a drafter (graphdef, params) for `target`; the target's
    embedding is shared."""
    from jspec.drafters.eagle3 import eagle3_tap_layers

    if name == "graft":
        options = {"vocab_size": target.cfg.vocab_size, **options}
    method = get_method(name, drafter=graphdef, taps=eagle3_tap_layers(target.cfg.num_layers), **options)
    return method, {"drafter": drafter_params, "embed": target.params["embed"][...]}


def dflash_method(name: str, target, drafter, *, gru_table: bool = False, **options) -> tuple[Method, Any]:
    """A dflash / domino / graft_tail method around a DFlashDrafter or DominoDrafter module for `target` (embedding
    and LM head shared). `dflash` on a Domino drafter runs its backbone alone (the head-off ablation); graft_tail
    drafts through the head when there is one.

    `gru_table`: precompute the Domino GRU's input gates of every token, E · W_ihᵀ ([V, 3G], vocabulary × 3 × GRU
    width more parameters), so each draft step gathers a row instead of running the W_ih GEMV."""
    from flax import nnx

    from jspec.drafters.domino import DominoDrafter

    if name == "domino" and not isinstance(drafter, DominoDrafter):
        raise UserError("domino needs a Domino checkpoint (dflash_config.projector_type \"domino\"); this one is a "
                        "plain DFlash drafter: use --method dflash")
    if name == "dflash" and isinstance(drafter, DominoDrafter):
        drafter = drafter.backbone
    candidates = options.get("candidates", 0)
    if candidates and not isinstance(drafter, DominoDrafter):
        raise UserError(f"{name} has no correction head to restrict: candidates apply to a Domino drafter")
    if not 0 <= candidates <= target.cfg.vocab_size:
        raise UserError(f"Domino candidates must be in 0..{target.cfg.vocab_size} (0: the full vocabulary), got "
                        f"{candidates}")
    head_drafts = options.get("head_drafts", 0)
    if head_drafts and not isinstance(drafter, DominoDrafter):
        raise UserError(f"{name} has no correction head: head_drafts applies to a Domino drafter")
    if head_drafts < 0:
        raise UserError(f"head_drafts must be >= 0 (0: every draft goes through the head), got {head_drafts}")
    head_stop = options.get("head_stop", 0.0)
    if head_stop and not isinstance(drafter, DominoDrafter):
        raise UserError(f"{name} has no correction head: head_stop applies to a Domino drafter")
    if head_stop and name == "graft_tail":
        raise UserError("head_stop is not supported by graft_tail: it applies to domino only")
    # The range, candidates > 0 and greedy drafting: Domino's own checks (methods.dflash.Domino.__post_init__).
    chunk = options.get("candidate_chunk", 0)
    if chunk and not candidates:
        raise UserError("approximate candidates (candidate_chunk) choose among Domino's candidates: they need "
                        "candidates > 0")
    if chunk < 0:
        raise UserError(f"candidate_chunk must be >= 0 (0: exact candidates), got {chunk}")
    if options.get("head_kernel") not in (None, "step", "block"):
        raise UserError(f"head_kernel must be 'step' or 'block', not {options['head_kernel']!r}")
    if options.get("head_kernel") and not (candidates and gru_table):
        raise UserError("a Domino head kernel runs the candidate loop with the GRU input table: it needs candidates "
                        "> 0 and gru_table")
    if name == "graft_tail":
        options = {"vocab_size": target.cfg.vocab_size, "head": isinstance(drafter, DominoDrafter), **options}
    cfg = drafter.backbone.cfg if isinstance(drafter, DominoDrafter) else drafter.cfg
    method = get_method(name, drafter=nnx.graphdef(drafter), taps=cfg.tap_layers, block_size=cfg.block_size,
                        shift_label=cfg.shift_label, mask_token_id=cfg.mask_token_id, **options)
    head = target.params["lm_head"] if "lm_head" in target.params else target.params["embed"]
    params = {"drafter": nnx.state(drafter), "embed": target.params["embed"][...], "lm_head": head[...]}
    if gru_table:
        if not isinstance(drafter, DominoDrafter) or name == "dflash":
            raise UserError(f"{name} drafts without a Domino head: the GRU input table applies to domino and "
                            "graft_tail with a Domino drafter")
        params["gru_table"] = drafter.head.input_table(params["embed"])
    return method, params


def get_method(name: str, **options) -> Method:
    """A method instance; options are the dataclass fields it accepts (unknown ones are an error)."""
    methods = available()
    if name not in methods:
        raise UserError(f"unknown method {name!r}; expected one of {', '.join(methods)}")
    cls = methods[name]
    fields = set(cls.__dataclass_fields__) - {"name"}
    unknown = set(options) - fields
    if unknown:
        raise UserError(f"method {name!r} does not take option(s) {sorted(unknown)}")
    return cls(**options)
