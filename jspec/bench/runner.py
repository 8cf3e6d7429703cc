"""Run methods over datasets on one model: vanilla first (the reference for speed and identical-output rate), every
prompt padded to one width for the whole run so each method compiles once, a warm-up call before timing."""

import dataclasses
import json
import pathlib
import time

import jax
import jax.numpy as jnp
from tqdm import tqdm

from jspec.bench.datasets import load_prompts
from jspec.bench.divergence import divergence_gap
from jspec.errors import UserError
from jspec.methods import EAGLE3_METHODS, build
from jspec.methods.graft import Eagle3Pruned
from jspec.retrieval.templates import TR_SIZE
from jspec.models.loading import LoadedModel
from jspec.runner import run_batch
from jspec.sampling import Sampling


@dataclasses.dataclass(frozen=True)
class BenchConfig:
    methods: tuple[str, ...]
    datasets: tuple[str, ...]
    limit: int
    max_new_tokens: int = 256
    sampling: Sampling = Sampling()
    seed: int = 0
    drafter: str | None = None  # draft_model's drafter
    eagle3_drafter: str | None = None  # the EAGLE-3 checkpoint directory of eagle3, eagle3_pruned and graft
    fixed_split: int = 40  # draft nodes kept every step by `graft_fixed` (graft without adaptive pruning)
    candidates: int = 32  # `domino_topk`: domino correcting each row's top-k base logits, GRU inputs from the table
    candidate_chunk: int = 0  # > 0: `domino_topk` / `domino_block` take approximate candidates (chunks of this size)
    select_kernel: bool = True  # `domino_block`: candidates from the sort-free selection kernel (False: XLA's sorts)
    full_block: bool = False  # block drafters with a shift_label checkpoint draft its last row too (a B + 1 chain)
    head_drafts: int = 0  # > 0: the `domino*` labels with a head correct only the first M drafts of a block
    head_stop: float = 0.05  # the running-confidence threshold of `domino_block_stop` (its head stops below it)
    draft_confidence: float = 0.5  # `draft_model_adaptive`: the chain stops after a draft below this probability
    draft_top_k: int = 3  # `draft_model_tree`: children per node of draft_model's dynamic tree
    method_states: tuple[tuple[str, str], ...] = ()  # (method, state file): the state each dataset starts from
    graft_tail_options: tuple[tuple[str, object], ...] = ()  # e.g. (("threshold", 0.5), ("tail", "tree"))
    dflash_drafter: str | None = None  # DFlash (or Domino) checkpoint of dflash, and of graft_tail
    domino_drafter: str | None = None  # Domino checkpoint of domino, and of graft_tail without dflash_drafter
    tr_tree: tuple[str, ...] = ()  # `token_recycling_tuned`: rank paths of its tree (e.g. calibrate --tree-out's)
    max_prompt_tokens: int = 1024


def run(model: LoadedModel, cfg: BenchConfig, out_dir: pathlib.Path, progress: bool = True) -> list[dict]:
    """Writes `results.jsonl` (one record per method x prompt) under `out_dir` and returns the records."""
    methods = ("vanilla",) + tuple(m for m in cfg.methods if m != "vanilla")
    drafters = {**dict.fromkeys(("draft_model", "draft_model_adaptive", "draft_model_tree"), cfg.drafter),
                **dict.fromkeys(EAGLE3_METHODS + ("graft_fixed",), cfg.eagle3_drafter),
                "dflash": cfg.dflash_drafter, "domino": cfg.domino_drafter, "domino_topk": cfg.domino_drafter,
                "domino_block": cfg.domino_drafter, "domino_block_stop": cfg.domino_drafter,
                "domino_headless": cfg.domino_drafter,
                "graft_tail": cfg.dflash_drafter or cfg.domino_drafter}
    options = {name: {} for name in methods}
    options["graft_fixed"] = {"fixed_split": cfg.fixed_split}
    options["domino_topk"] = {"candidates": cfg.candidates, "gru_table": True,  # Domino's fast head
                              **({"candidate_chunk": cfg.candidate_chunk} if cfg.candidate_chunk else {}),
                              **({} if cfg.select_kernel else {"select_kernel": False})}
    options["domino_block"] = {**options["domino_topk"], "head_kernel": "block"}  # ... as one GPU kernel per block
    options["domino_block_stop"] = {**options["domino_block"], "head_stop": cfg.head_stop}  # ... stopping its head
    if cfg.head_drafts:
        for name in ("domino", "domino_topk", "domino_block", "domino_block_stop"):
            options[name] = {**options.get(name, {}), "head_drafts": cfg.head_drafts}
    if cfg.full_block:
        for name in set(methods) & {"dflash", "domino", "domino_topk", "domino_block", "domino_block_stop",
                                    "domino_headless", "graft_tail"}:
            options[name] = {**options[name], "full_block": True}
    options["draft_model_adaptive"] = {"min_confidence": cfg.draft_confidence}
    options["draft_model_tree"] = {"top_k": cfg.draft_top_k}
    options["token_recycling_full"] = {"budget": TR_SIZE}  # the paper's whole 2.2.2 template
    options["token_recycling_tuned"] = {"budget": len(cfg.tr_tree) + 1, "tree": cfg.tr_tree}
    options["graft_tail"] = dict(cfg.graft_tail_options)
    if "eagle3" in methods and {"graft", "graft_fixed", "eagle3_pruned"} & set(methods):
        # The dense baseline grows the same tree Graft prunes (Graft drafts deeper than eagle3's default).
        dense = Eagle3Pruned()
        options["eagle3"] = {"depth": dense.depth, "top_k": dense.top_k, "budget": dense.budget}
    built = {name: build(method_of(name), model, drafters.get(name), **options[name]) for name in methods}
    states = {}
    for name, path in cfg.method_states:
        if name not in built:
            raise UserError(f"--method-state names {name!r}, which is not among --methods")
        states[name] = built[name][0].load_state(path)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = []
    sampled = cfg.sampling.temperature > 0
    with open(out_dir / "results.jsonl", "w", encoding="utf-8") as sink:
        encoded = {d: _encode(model, load_prompts(d, cfg.limit), cfg.max_prompt_tokens) for d in cfg.datasets}
        # One padded width for every dataset, so each method compiles once for the whole run.
        width = -(-max(len(p["ids"]) for ps in encoded.values() for p in ps) // 64) * 64
        cache_len = width + cfg.max_new_tokens + 128  # room for the largest tree past the last token
        for dataset, prompts in encoded.items():
            reference = {}
            for name in methods:
                method, params = built[name]
                kw = dict(max_new_tokens=cfg.max_new_tokens, sampling=cfg.sampling, max_cache_len=cache_len,
                          method_params=params, pad_to=width)
                # Compile outside the timing (a loaded state is fitted to the call, so pass the same pytree shape;
                # a copy, since a call consumes the state it is given).
                run_batch(model, method, [prompts[0]["ids"]], seed=cfg.seed,
                          method_state=jax.tree.map(jnp.copy, states.get(name)), **kw)
                state = states.get(name)
                bar = tqdm(prompts, desc=f"{dataset}/{name}", disable=not progress, unit="prompt")
                for i, p in enumerate(bar):
                    [rec], state = run_batch(model, method, [p["ids"]], seed=cfg.seed + i, method_state=state, **kw)
                    if name == "vanilla":
                        reference[p["id"]] = rec["tokens"]
                    # Sampled outputs follow each method's own random stream: comparing them with vanilla's says
                    # nothing (the CPU tests check the distribution instead).
                    identical = None if sampled else rec["tokens"] == reference[p["id"]]
                    rec = {"dataset": dataset, "method": name, "id": p["id"], "prompt_tokens": len(p["ids"]),
                           **rec, "identical": identical, "model": model.name,
                           "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
                    if identical is False:  # near-tie in reduced precision, or a bug? record the target's margin
                        rec["divergence"] = divergence_gap(model, p["ids"], reference[p["id"]], rec["tokens"])
                    sink.write(json.dumps(rec) + "\n")
                    sink.flush()
                    records.append(rec)
                    bar.set_postfix(mat=f"{rec['mat']:.2f}", tok_s=f"{rec['tok_per_s']:.1f}")
    return records


def method_of(label: str) -> str:
    """The registered method behind a bench label (`graft_fixed` is graft with a fixed draft/retrieval split,
    `domino_topk` domino with a candidate-restricted correction and the GRU input table, `domino_block` the same
    loop as one persistent GPU kernel per block (batch 1; elsewhere the XLA loop), `domino_block_stop` that with the
    head stopped once its drafts' running confidence falls below `head_stop`, `domino_headless` the Domino
    checkpoint's backbone alone (dflash on it: the head-off ablation), `draft_model_adaptive` draft_model with a
    confidence-adaptive chain, `draft_model_tree` draft_model with a dynamic tree, `token_recycling_full`
    token_recycling with the whole 81-slot template instead of the 60-slot budget, `token_recycling_tuned`
    token_recycling on a given tree, `--tr-tree`)."""
    return {"graft_fixed": "graft", "domino_topk": "domino", "domino_block": "domino", "domino_block_stop": "domino",
            "domino_headless": "dflash",
            "draft_model_adaptive": "draft_model", "draft_model_tree": "draft_model",
            "token_recycling_full": "token_recycling", "token_recycling_tuned": "token_recycling"}.get(label, label)


def _encode(model: LoadedModel, prompts: list[dict], max_tokens: int) -> list[dict]:
    out = []
    for p in prompts:
        ids = model.tokenizer.encode_chat([{"role": "user", "content": p["prompt"]}]) if model.chat else \
            model.tokenizer.encode(p["prompt"])
        if len(ids) <= max_tokens:  # very long articles/conversations would dominate the cache size
            out.append({**p, "ids": ids})
    if not out:
        raise UserError(f"every prompt is longer than {max_tokens} tokens")
    return out
