"""Where a speculative step's time goes, on a real model and prompt: the whole step against its parts.

    python bench/step_breakdown.py --model qwen2.5-coder-1.5b --methods token_recycling,eagle3,graft \
        --eagle3-drafter RUN/drafter --method-state graft=graft_state.npz --out OUT_DIR

After the prefill of one HumanEval prompt, each row times `--steps` iterations chained in one jitted `fori_loop`
(device time per iteration, no host dispatch in between; median over `--reps`):
- `decode`: one plain target forward of one token (+ LM head, argmax): the vanilla step;
- `step`: the whole speculative step of `jspec.spec_decode` (propose, verify, accept, observe, commit, bookkeeping);
- `propose`: the method's proposal alone (drafting, retrieval, merging), its state carried;
- `verify`: the target forward over the method's tree + LM head + acceptance, on a fixed tree;
- `observe`: the method's observation alone (adjacency update, drafter cache commit) on fixed inputs;
- `commit`: the target cache compaction of the accepted path.
`other` = step − (propose + verify + observe + commit): the loop's bookkeeping and what fusion across the parts
saves or costs. `decode_while` and `step_while` time decode and step again in a `while_loop` whose trip count XLA
cannot know, like the real decode loop's "every row done" condition. End-of-sequence stops are disabled so that
every iteration does a full step.

`--contexts 2048,8192` times every part at those context lengths instead (the prompt repeated to length): the
verify / decode ratio of the tree-engine issue. `JSPEC_ATTENTION=reference|pallas` picks the attention kernel.

`--weights random` builds the preset's architecture with random weights (no GGUF needed: costs do not depend on weight
values; the prompt is random token ids). `--profile` also traces one `decode`, `verify` and `step` loop with
jax.profiler and writes, per method and context, a table of the device kernels per iteration (profile_*.md).
"""

import argparse
import dataclasses
import json
import tempfile
import os
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.method_args import add_method_arguments, built_methods  # noqa: E402
from bench.timing import timed  # noqa: E402
from bench.trace_summary import format_table, summarize  # noqa: E402
from jspec.bench.datasets import load_prompts  # noqa: E402
from jspec.bench.runner import _encode  # noqa: E402
from jspec.methods.base import Context  # noqa: E402
from jspec.models.cache import BlockMask  # noqa: E402
from jspec.models.decoder import attention_kernel  # noqa: E402
from jspec.config import model_preset  # noqa: E402
from jspec.models.decoder import Decoder  # noqa: E402
from jspec.models.loading import LoadedModel, load_model  # noqa: E402
from jspec.sampling import Sampling  # noqa: E402
from jspec.spec_decode import _concat, _prefill_jit, _spec_step  # noqa: E402
from jspec.verify import choose_and_accept, commit_kv  # noqa: E402


def loop(body, steps: int, data_dependent: bool = False):
    """jit((carry, inputs) -> carry after `steps` applications of `body(carry, inputs)`). The carry is kept opaque
    to the optimiser and the fixed inputs are arguments, not constants, so that nothing is folded at compile time.

    `data_dependent`: the trip count is a traced argument, so XLA cannot know it and, as in the decode loop (whose
    condition is "every row done"), evaluates the loop condition on the device at every iteration."""
    if not data_dependent:
        return jax.jit(lambda carry, inputs: jax.lax.fori_loop(
            0, steps, lambda _, c: body(jax.lax.optimization_barrier(c), inputs), carry))
    run = jax.jit(lambda carry, inputs, n: jax.lax.while_loop(
        lambda c: c[1] < n, lambda c: (body(jax.lax.optimization_barrier(c[0]), inputs), c[1] + 1),
        (carry, jnp.zeros((), jnp.int32)))[0])
    return lambda carry, inputs: run(carry, inputs, jnp.asarray(steps, jnp.int32))


PARTS = ("decode", "step", "propose", "verify", "observe", "commit", "decode_while", "step_while")


def random_model(name: str, dtype: str, num_layers: int | None = None) -> LoadedModel:
    """The preset's exact architecture with random weights (step costs do not depend on the weights' values);
    `num_layers`: fewer decoder layers (the tests' smoke runs, where compiling 30 layers on a CPU dominates)."""
    cfg = model_preset(name).config
    if num_layers is not None:
        cfg = dataclasses.replace(cfg, num_layers=num_layers)
    graphdef, params = nnx.split(Decoder(cfg, dtype=jnp.dtype(dtype), rngs=nnx.Rngs(0)))
    return LoadedModel(name=name, cfg=cfg, graphdef=graphdef, params=params, tokenizer=None, dtype=dtype, chat=False)


def breakdown(model_bundle, method, method_params, method_state, prompt: list[int], steps: int, reps: int,
              max_cache_len: int, profile: list[str] | None = None,
              parts: tuple[str, ...] = PARTS, top: int = 25) -> dict[str, float]:
    """ms per step of each part; with `profile`, also appends a kernel table per traced part to that list."""
    graphdef, params = model_bundle.graphdef, model_bundle.params
    sampling = Sampling()
    state = _prefill_jit(graphdef, params, jnp.asarray([prompt]), jnp.asarray([len(prompt)]), jax.random.key(0),
                         method_params, jax.tree.map(jnp.copy, method_state),  # the prefill consumes its state
                         method=method, sampling=sampling,
                         max_new_tokens=max_cache_len, eos_ids=(), max_cache_len=max_cache_len,
                         cache_dtype=jax.tree.leaves(params)[0].dtype)
    depth = method.max_depth + 1

    def ctx_of(s):
        return Context(root=s.root, history=s.history, history_len=s.cache.lengths + 1, lengths=s.cache.lengths)

    # Weights travel as arguments, as in the decode loop (closed over, they would become compile-time constants).
    def per_step(body, carry, fixed=(), data_dependent=False) -> float:
        def with_model(c, inputs):
            p, mp, f = inputs
            return body(nnx.merge(graphdef, p), mp, c, f)

        timed_loop = loop(with_model, steps, data_dependent)
        ms = 1e3 * timed(timed_loop, carry, (params, method_params, fixed), n=reps) / steps
        return ms, timed_loop, (carry, (params, method_params, fixed))

    # On a CPU run (smoke test) the host's events stand in for kernels.
    device = "/device:GPU:0" if jax.devices()[0].platform == "gpu" else "/host:CPU"

    def traced(name: str, body, carry, fixed=()) -> float:
        ms, run, args = per_step(body, carry, fixed)
        if profile is not None:
            with tempfile.TemporaryDirectory() as trace_dir:
                with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
                    jax.block_until_ready(run(*args))
                table = format_table(summarize(trace_dir, device), steps, top)
                profile.append(f"### {name} ({ms:.3f} ms / step timed)\n\n{table}")
        return ms

    def step_body(model, mp, s, _):
        return _spec_step(model, method, mp, s, sampling, (), max_cache_len)

    def propose_body(model, mp, c, _):
        s, mstate, checksum = c
        tree, mstate = method.propose(mp, mstate, ctx_of(s))
        # The tree feeds the carry: otherwise XLA drops every draft computed only for it (a block drafter's LM head
        # and argmax, Domino's head), and `propose` times the state update alone.
        return s, mstate, checksum + jnp.sum(tree.tokens)

    def verify(model, s, tree):
        hidden, cache, taps = model(tree.tokens, tree.positions(s.cache.lengths), s.cache,
                                    tree.mask(s.cache.lengths), method.target_taps)
        logits = model.logits(hidden)
        return cache, logits, choose_and_accept(tree, logits, sampling, s.rng, depth), _concat(taps)

    def verify_body(model, mp, c, tree):
        s, _ = c
        cache, _, acc, _ = verify(model, s, tree)
        return dataclasses.replace(s, cache=cache), acc.path_len.sum()

    def observe_body(model, mp, mstate, inputs):
        return method.observe(mp, mstate, *inputs)

    def commit_body(model, mp, cache, acc):
        cache = commit_kv(cache, acc, jnp.ones_like(acc.path_len, bool))
        return dataclasses.replace(cache, lengths=cache.lengths - acc.path_len)  # stay in place

    def decode_body(model, mp, s, _):
        tok = s.root[:, None]
        mask = BlockMask(start=s.cache.lengths, block=jnp.ones((tok.shape[0], 1, 1), bool))
        hidden, cache, _ = model(tok, s.cache.lengths[:, None], s.cache, mask)
        nxt = jnp.argmax(model.logits(hidden)[:, -1], -1).astype(jnp.int32)
        return dataclasses.replace(s, cache=dataclasses.replace(cache, lengths=s.cache.lengths), root=nxt)

    @jax.jit
    def first_step(params, method_params, s):
        model = nnx.merge(graphdef, params)
        tree, _ = method.propose(method_params, s.method_state, ctx_of(s))
        _, logits, acc, features = verify(model, s, tree)
        return tree, logits, acc, features

    tree, logits, acc, features = first_step(params, method_params, state)
    timers = {"decode": lambda: traced("decode", decode_body, state),
              "step": lambda: traced("step", step_body, state),
              "decode_while": lambda: per_step(decode_body, state, data_dependent=True)[0],
              "step_while": lambda: per_step(step_body, state, data_dependent=True)[0],
              "propose": lambda: per_step(propose_body, (state, state.method_state, jnp.zeros((), jnp.int32)))[0],
              "verify": lambda: traced("verify", verify_body, (state, jnp.zeros((), jnp.int32)), tree),
              "observe": lambda: per_step(observe_body, state.method_state, (tree, logits, acc, features))[0],
              "commit": lambda: per_step(commit_body, state.cache, acc)[0]}
    rows = {part: timers[part]() for part in parts}
    if {"step", "propose", "verify", "observe", "commit"} <= rows.keys():
        rows["other"] = rows["step"] - sum(rows[k] for k in ("propose", "verify", "observe", "commit"))
    return rows


def main():
    ap = argparse.ArgumentParser()
    add_method_arguments(ap, "token_recycling")
    ap.add_argument("--steps", type=int, default=64, help="iterations per timed loop")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--max-cache-len", type=int, default=2048)
    ap.add_argument("--contexts", type=lambda s: [int(x) for x in s.split(",") if x], default=[],
                    help="context lengths to time at (the prompt repeated to that length); default: the prompt as is")
    ap.add_argument("--parts", type=lambda s: tuple(s.split(",")), default=PARTS,
                    help=f"which parts to time (default all: {','.join(PARTS)})")
    ap.add_argument("--weights", choices=("real", "random"), default="real")
    ap.add_argument("--tree-tunings", type=lambda s: [t.strip() for t in s.split(";") if t.strip()], default=[],
                    help="also time --tuning-parts under each of these JSPEC_TREE_TUNING values (';'-separated, e.g. "
                         "'block_r=32,block_k=32;num_splits=12'): tree-attention configurations compared in the step")
    ap.add_argument("--tuning-parts", type=lambda s: tuple(s.split(",")), default=("verify",))
    ap.add_argument("--profile", action="store_true", help="also write per-kernel tables (jax.profiler)")
    ap.add_argument("--top", type=int, default=25, help="kernels listed one by one in a --profile table")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    if unknown := (set(args.parts) | set(args.tuning_parts)) - set(PARTS):
        ap.error(f"unknown --parts / --tuning-parts {sorted(unknown)}; choose from {','.join(PARTS)}")
    if args.weights == "random":
        model = random_model(args.model, args.dtype)
        prompt = [int(t) for t in jax.random.randint(jax.random.key(1), (300,), 100, model.cfg.vocab_size - 100)]
    else:
        model = load_model(args.model, dtype=args.dtype)
        prompt = _encode(model, load_prompts(args.dataset, 1), 1024)[0]["ids"]
    prompts = {len(prompt): prompt} if not args.contexts else {n: (prompt * (n // len(prompt) + 1))[:n]
                                                               for n in args.contexts}
    rows = []
    for name, method, params, state in built_methods(args, model):
        for context, ids in prompts.items():
            cache_len = max(args.max_cache_len, context + 256)  # room for the largest tree past the context
            s = (method.init_state(params, 1, cache_len) if state is None else
                 method.resume_state(params, state, 1, cache_len))
            tables = [] if args.profile else None
            parts = breakdown(model, method, params, s, ids, args.steps, args.reps, cache_len, tables,
                              args.parts, args.top)
            if tables:
                out_dir = pathlib.Path(args.out)
                out_dir.mkdir(parents=True, exist_ok=True)
                (out_dir / f"profile_{name}_{context}.md").write_text(
                    f"# {name}, context {context}, {jax.devices()[0].device_kind}\n\n" + "\n\n".join(tables) + "\n")
            rows.append({"method": name, "context": context, **parts})
            print(name, context, {k: round(v, 3) for k, v in parts.items()}, flush=True)
            for tuning in args.tree_tunings:
                os.environ["JSPEC_TREE_TUNING"] = tuning  # read when the loops below are traced
                tuned = breakdown(model, method, params, s, ids, args.steps, args.reps, cache_len, None,
                                  args.tuning_parts)
                os.environ.pop("JSPEC_TREE_TUNING")
                rows.append({"method": name, "context": context, "tree_tuning": tuning, **tuned})
                print(name, context, tuning, {k: round(v, 3) for k, v in tuned.items()}, flush=True)
    report = {"date": time.strftime("%Y-%m-%d"), "device": jax.devices()[0].device_kind, "jax": jax.__version__,
              "model": args.model, "weights": args.weights, "dtype": args.dtype,
              "attention": os.environ.get("JSPEC_ATTENTION") or attention_kernel(),
              "tree_layout": os.environ.get("JSPEC_TREE_LAYOUT", "auto"), "command": " ".join(sys.argv),
              "ms_per_step": rows}
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "step_breakdown.json").write_text(json.dumps(report, indent=2))
    cols = [c for c in ("decode", "step", "propose", "verify", "observe", "commit", "other", "decode_while",
                        "step_while") if c in rows[0]]
    decode_at = {r["context"]: r["decode"] for r in rows if "decode" in r and "tree_tuning" not in r}
    print(f"{report['device']}  {args.model} {args.dtype}  attention={report['attention']}  ms per step "
          f"({args.steps}-step loops)")
    ratios = [(f"{k} / decode", k) for k in ("step", "verify") if k in cols and "decode" in cols]
    print("| method | context | " + " | ".join(cols + [name for name, _ in ratios]) + " |\n|---|---|"
          + "---|" * (len(cols) + len(ratios)))
    for r in rows:
        label = f"{r['method']} ({r['tree_tuning']})" if "tree_tuning" in r else r["method"]
        print(f"| {label} | {r['context']} | " + " | ".join(f"{r[c]:.3f}" if c in r else "–" for c in cols)
              + "".join(f" | {r[k] / decode_at[r['context']]:.2f}" if k in r and r["context"] in decode_at else " | –"
                        for _, k in ratios) + " |")


if __name__ == "__main__":
    main()
