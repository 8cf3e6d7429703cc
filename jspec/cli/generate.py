"""`jspec generate`: decode prompts (text, chat records or a JSONL file) with a model and a method."""

import json
import sys

from jspec.cli.args import positive_int, resolve_dtype
from jspec.cli.options import (add_domino_arguments, add_tail_arguments, budget_option, candidates_option,
                               draft_model_options, drafter_placeholder, fixed_split_option, tail_options,
                               tr_tree_option)
from jspec.errors import UserError


def add_generate_parser(sub) -> None:
    gen = sub.add_parser("generate", help="generate text with a model and a decoding method")
    gen.add_argument("--model", default="smollm2-135m", help="preset name, .gguf file or HF checkpoint directory")
    gen.add_argument("--method", default="vanilla", help="vanilla, pld, token_recycling, draft_model, eagle3, "
                     "eagle3_pruned, graft, dflash, domino, graft_tail")
    gen.add_argument("--drafter", help="drafter checkpoint (methods that need one)")
    src = gen.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompts-file", help='JSONL file of {"prompt": ...} or {"messages": [...]} records')
    gen.add_argument("--max-new-tokens", type=positive_int("--max-new-tokens"), default=None)
    gen.add_argument("--temperature", type=float, default=None)
    gen.add_argument("--top-p", type=float, default=None)
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                     help="auto: bfloat16 on GPU/TPU, float32 on CPU")
    gen.add_argument("--budget", type=positive_int("--budget"), default=60, help="verification slots per step")
    gen.add_argument("--fixed-split", type=int, default=None, metavar="K",
                     help="graft without adaptive pruning: keep K draft nodes every step, retrieve the rest")
    add_domino_arguments(gen, "domino / graft_tail with a Domino drafter", candidates=None)
    gen.add_argument("--head-stop", type=float, default=None, metavar="P",
                     help="domino with --candidates: stop the head once the running product of its drafts' "
                     "candidate probabilities falls below P; later drafts take the base argmax (default: off)")
    gen.add_argument("--gru-table", action="store_true",
                     help="domino / graft_tail with a Domino drafter: gather the GRU input gates from a precomputed "
                     "[vocab, 3 x GRU width] table instead of a GEMV per draft")
    gen.add_argument("--head-kernel", choices=("block", "step"), default=None,
                     help="domino / graft_tail with --candidates and --gru-table, greedy drafts: on a GPU, run the "
                     "head's candidate loop as one persistent kernel per block (block, batch 1: the fastest measured) "
                     "or a kernel per draft (step); elsewhere, and for shapes a kernel does not take, the XLA loop")
    gen.add_argument("--draft-confidence", type=float, default=None, metavar="P",
                     help="draft_model: stop the chain after a draft the drafter gives probability < P "
                     "(default: always draft gamma = 4)")
    gen.add_argument("--draft-top-k", type=positive_int("--draft-top-k"), default=None, metavar="K",
                     help="draft_model: grow a 16-slot dynamic tree, K children per node, instead of a chain")
    add_tail_arguments(gen)
    gen.add_argument("--tr-tree", metavar="FILE", help="token_recycling: verify this tree instead of the 2.2.2 "
                     "prefix (a tree file from `jspec calibrate --tree-out` or bench/tr_node_stats.py, or a file of "
                     "rank paths; sets the budget)")
    gen.add_argument("--max-cache-len", type=positive_int("--max-cache-len"), default=None)
    gen.add_argument("--batch-size", type=positive_int("--batch-size"), default=1, help="prompts decoded together")
    gen.add_argument("--method-state", help="start from a saved method state (e.g. `jspec calibrate` output)")
    gen.add_argument("--raw", action="store_true", help="do not apply the chat template")
    gen.add_argument("--json", action="store_true", help="one JSON record per prompt on stdout")
    gen.set_defaults(run=run_generate)


def read_prompts(args) -> list[dict]:
    """Records with either "prompt" (text) or "messages" (chat)."""
    if args.prompts_file:
        try:
            lines = open(args.prompts_file, encoding="utf-8").read().splitlines()
        except OSError as e:
            raise UserError(f"cannot read --prompts-file: {e}") from None
        except UnicodeDecodeError as e:
            raise UserError(f"cannot read --prompts-file {args.prompts_file}: not UTF-8 text ({e.reason} at byte "
                            f"{e.start})") from None
        records = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{args.prompts_file}:{n}: invalid JSON ({e.msg})") from None
            if not isinstance(rec, dict) or not ("prompt" in rec or "messages" in rec):
                raise UserError(f'{args.prompts_file}:{n}: expected an object with "prompt" or "messages"')
            if "messages" in rec:
                messages = rec["messages"]
                if not (isinstance(messages, list) and messages and all(isinstance(m, dict) for m in messages)):
                    raise UserError(f'{args.prompts_file}:{n}: "messages" must be a non-empty list of '
                                    '{"role": ..., "content": ...} objects')
            elif not isinstance(rec["prompt"], str):
                raise UserError(f'{args.prompts_file}:{n}: "prompt" must be a string')
            records.append(rec)
        if not records:
            raise UserError(f"{args.prompts_file}: no prompts")
        return records
    if args.prompt is None:
        return [{"prompt": "Write a Python function that checks whether a number is prime."}]
    return [{"prompt": args.prompt}]


def encode_record(tokenizer, rec: dict, chat: bool) -> tuple[str, list[int]]:
    if "messages" in rec:
        if not chat:
            raise UserError('"messages" records need a chat model (drop --raw)')
        return rec["messages"][-1].get("content", ""), tokenizer.encode_chat(rec["messages"])
    text = rec["prompt"]
    if not isinstance(text, str) or not text.strip():
        raise UserError("empty prompt")
    return text, tokenizer.render_prompt(text, chat=chat)


def run_generate(args) -> None:
    from jspec.methods import build, get_method

    # Validate the name and options before anything heavy is loaded.
    options = {**budget_option(args.method, args.budget), **fixed_split_option(args.method, args.fixed_split),
               **tail_options((args.method,), args),
               **candidates_option(args.method, args.candidates, args.candidate_chunk),
               **draft_model_options(args.method, args.draft_confidence, args.draft_top_k)}
    if args.tr_tree is not None:
        if args.method != "token_recycling":
            raise UserError("--tr-tree applies to --method token_recycling only")
        options |= tr_tree_option(args.tr_tree)
    if args.gru_table and args.method not in ("domino", "graft_tail"):
        raise UserError("--gru-table applies to --method domino and graft_tail only")
    if args.head_kernel is not None:
        if args.method not in ("domino", "graft_tail"):
            raise UserError("--head-kernel applies to --method domino and graft_tail (with a Domino drafter) only")
        if args.candidates is None or not args.gru_table:
            raise UserError("--head-kernel runs Domino's candidate loop with the GRU input table: it needs "
                            "--candidates and --gru-table")
        options["head_kernel"] = args.head_kernel
    if args.full_block:
        if args.method not in ("dflash", "domino", "graft_tail"):
            raise UserError("--full-block applies to --method dflash, domino and graft_tail only")
        options["full_block"] = True
    if args.head_drafts is not None:
        if args.method not in ("domino", "graft_tail"):
            raise UserError("--head-drafts applies to --method domino and graft_tail (with a Domino drafter) only")
        options["head_drafts"] = args.head_drafts
    if args.head_stop is not None:
        if args.method != "domino":
            raise UserError("--head-stop applies to --method domino only")
        if args.candidates is None:
            raise UserError("--head-stop needs --candidates: the confidence is a softmax over each row's candidates")
        options["head_stop"] = args.head_stop
    get_method(args.method, **drafter_placeholder(args.method), **options)
    import jax

    from jspec.config import decode_defaults
    from jspec.models.loading import load_model
    from jspec.runner import run_batch
    from jspec.sampling import Sampling

    defaults = decode_defaults()
    sampling = Sampling(temperature=defaults.temperature if args.temperature is None else args.temperature,
                        top_p=defaults.top_p if args.top_p is None else args.top_p)
    max_new = args.max_new_tokens or defaults.max_new_tokens
    seed = defaults.seed if args.seed is None else args.seed
    cache_len = args.max_cache_len or defaults.max_cache_len
    records = read_prompts(args)
    dtype = resolve_dtype(args.dtype)
    model = load_model(args.model, dtype=dtype, progress=not args.json)
    if cache_len > model.cfg.max_position:
        raise UserError(f"--max-cache-len {cache_len} exceeds the context length of {model.name} "
                        f"({model.cfg.max_position} tokens)")
    method, method_params = build(args.method, model, args.drafter, **options,
                                  **({"gru_table": True} if args.gru_table else {}))
    chat = model.chat and not args.raw
    encoded = [encode_record(model.tokenizer, rec, chat) for rec in records]
    method_state = method.load_state(args.method_state) if args.method_state else None
    for start in range(0, len(encoded), args.batch_size):
        batch = encoded[start : start + args.batch_size]
        try:
            records, method_state = run_batch(model, method, [ids for _, ids in batch], max_new_tokens=max_new,
                                              sampling=sampling, seed=seed + start, max_cache_len=cache_len,
                                              method_params=method_params, method_state=method_state)
        except jax.errors.JaxRuntimeError as e:
            if "RESOURCE_EXHAUSTED" not in str(e):
                raise
            raise UserError(f"out of memory on {jax.default_backend()} for batch size {len(batch)} and cache length "
                            f"{cache_len}: lower --batch-size or --max-cache-len") from None
        for (prompt, _), record in zip(batch, records):
            _emit(args, model, prompt, record)


def _emit(args, model, prompt: str, record: dict) -> None:
    text = model.tokenizer.decode(record["tokens"])
    if args.json:  # the CLI contract's fields (bench records also carry the prefill / loop time split)
        fields = {k: v for k, v in record.items() if k not in ("prefill_seconds", "loop_seconds")}
        print(json.dumps({"prompt": prompt, **fields, "text": text, "method": args.method, "model": model.name},
                         ensure_ascii=False), flush=True)
    else:
        print(text, flush=True)
        print(f"[{args.method}] {record['new_tokens']} tokens in {record['seconds']:.2f}s "
              f"({record['tok_per_s']:.1f} tok/s, {record['steps']} target steps, MAT {record['mat']:.2f}; "
              "compile included on first call)", file=sys.stderr, flush=True)
