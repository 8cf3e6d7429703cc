"""`jspec` command line: generate | bench | report | calibrate | train | assets. User mistakes exit with status 2 and one `jspec: error: ...` line."""

import argparse
import json
import pathlib
import shlex
import sys
import time

from jspec.bench.datasets import DATASETS
from jspec.errors import UserError



class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's default prints usage + exits 2; the contract wants one line
        raise UserError(message)


def _positive_int(name: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {value}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    from jspec.assets_cli import add_assets_parser

    parser = _Parser(prog="jspec", description="Lossless speculative decoding in JAX.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    gen = sub.add_parser("generate", help="generate text with a model and a decoding method")
    gen.add_argument("--model", default="smollm2-135m", help="preset name, .gguf file or HF checkpoint directory")
    gen.add_argument("--method", default="vanilla", help="vanilla, pld, token_recycling, draft_model, eagle3, "
                     "eagle3_pruned, graft, dflash, domino, graft_tail")
    gen.add_argument("--drafter", help="drafter checkpoint (methods that need one)")
    src = gen.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompts-file", help='JSONL file of {"prompt": ...} or {"messages": [...]} records')
    gen.add_argument("--max-new-tokens", type=_positive_int("--max-new-tokens"), default=None)
    gen.add_argument("--temperature", type=float, default=None)
    gen.add_argument("--top-p", type=float, default=None)
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                     help="auto: bfloat16 on GPU/TPU, float32 on CPU")
    gen.add_argument("--budget", type=_positive_int("--budget"), default=60, help="verification slots per step")
    gen.add_argument("--fixed-split", type=int, default=None, metavar="K",
                     help="graft without adaptive pruning: keep K draft nodes every step, retrieve the rest")
    _add_domino_arguments(gen, "domino / graft_tail with a Domino drafter", candidates=None)
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
    gen.add_argument("--draft-top-k", type=_positive_int("--draft-top-k"), default=None, metavar="K",
                     help="draft_model: grow a 16-slot dynamic tree, K children per node, instead of a chain")
    _add_tail_arguments(gen)
    gen.add_argument("--tr-tree", metavar="FILE", help="token_recycling: verify this tree instead of the 2.2.2 "
                     "prefix (a tree file from `jspec calibrate --tree-out` or bench/tr_node_stats.py, or a file of "
                     "rank paths; sets the budget)")
    gen.add_argument("--max-cache-len", type=_positive_int("--max-cache-len"), default=None)
    gen.add_argument("--batch-size", type=_positive_int("--batch-size"), default=1, help="prompts decoded together")
    gen.add_argument("--method-state", help="start from a saved method state (e.g. `jspec calibrate` output)")
    gen.add_argument("--raw", action="store_true", help="do not apply the chat template")
    gen.add_argument("--json", action="store_true", help="one JSON record per prompt on stdout")
    bench = sub.add_parser("bench", help="benchmark methods on datasets (MAT, tok/s, speedup vs vanilla)")
    bench.add_argument("--model", default="smollm2-135m")
    bench.add_argument("--methods", default="vanilla,pld", help="comma-separated; vanilla is always run first; "
                       "graft_fixed is graft with a fixed split (--fixed-split), domino_topk is domino with "
                       "--candidates, domino_block is domino_topk as one persistent GPU kernel per block, "
                       "domino_block_stop is domino_block with --head-stop, "
                       "domino_headless is the --domino-drafter's backbone alone (the head-off "
                       "ablation), draft_model_adaptive is draft_model with --draft-confidence, "
                       "draft_model_tree is draft_model with --draft-top-k, token_recycling_full is token_recycling "
                       "with the whole 81-slot template, token_recycling_tuned is token_recycling on --tr-tree")
    bench.add_argument("--dataset", default="humaneval", help="comma-separated: humaneval, gsm8k, mbpp, mtbench, "
                       "alpaca, xsum, sharegpt")
    bench.add_argument("--limit", type=_positive_int("--limit"), default=20, help="prompts per dataset")
    bench.add_argument("--max-new-tokens", type=_positive_int("--max-new-tokens"), default=256)
    bench.add_argument("--temperature", type=float, default=0.0)
    bench.add_argument("--top-p", type=float, default=1.0)
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--drafter", help="drafter for draft_model (model name/path or truncate:N)")
    bench.add_argument("--eagle3-drafter", help="EAGLE-3 checkpoint directory for eagle3, eagle3_pruned and graft")
    bench.add_argument("--dflash-drafter", help="DFlash (or Domino) checkpoint directory for dflash and graft_tail")
    bench.add_argument("--domino-drafter", help="Domino checkpoint directory for domino (and graft_tail when "
                       "--dflash-drafter is not given)")
    bench.add_argument("--fixed-split", type=_positive_int("--fixed-split"), default=40, metavar="K",
                       help="draft nodes of the graft_fixed method (graft without adaptive pruning: K draft nodes "
                       "every step, the rest retrieved)")
    _add_domino_arguments(bench, "domino_topk and domino_block (their GRU inputs from a precomputed table)",
                          candidates=32)
    bench.add_argument("--xla-select", action="store_true",
                       help="domino_block: select the candidates with XLA's sorts instead of the selection kernel")
    bench.add_argument("--head-stop", type=float, default=None, metavar="P",
                       help="domino_block_stop: stop the head once the running product of its drafts' candidate "
                       "probabilities falls below P (default: 0.05)")
    bench.add_argument("--draft-confidence", type=float, default=0.5, metavar="P",
                       help="draft_model_adaptive: stop the chain after a draft the drafter gives probability < P")
    bench.add_argument("--draft-top-k", type=_positive_int("--draft-top-k"), default=3, metavar="K",
                       help="draft_model_tree: a 16-slot dynamic tree with K children per node")
    _add_tail_arguments(bench)
    bench.add_argument("--tr-tree", metavar="FILE", help="tree of token_recycling_tuned: a tree file from `jspec "
                       "calibrate --tree-out` or bench/tr_node_stats.py, or a file of rank paths (\"0 1 00 ...\")")
    bench.add_argument("--method-state", action="append", default=[], metavar="METHOD=PATH",
                       help="start every dataset of METHOD from a saved state (e.g. graft=calibrated.npz from "
                       "`jspec calibrate`); repeatable")
    bench.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto")
    bench.add_argument("--out", required=True, help="output folder for results.jsonl, summary.md, summary.png")
    rep = sub.add_parser("report", help="merge `jspec bench` runs (e.g. one per GPU, split by dataset) into one "
                         "summary")
    rep.add_argument("runs", nargs="+", metavar="RUN", help="output folders of `jspec bench`")
    rep.add_argument("--out", required=True, help="folder for the merged results.jsonl, summary.md, summary.png")
    cal = sub.add_parser("calibrate", help="warm up a method's state on ShareGPT prompts and save it")
    cal.add_argument("--model", default="smollm2-135m")
    cal.add_argument("--method", default="token_recycling")
    cal.add_argument("--warmup", type=_positive_int("--warmup"), default=5, help="ShareGPT prompts to decode")
    cal.add_argument("--max-new-tokens", type=_positive_int("--max-new-tokens"), default=256)
    cal.add_argument("--budget", type=_positive_int("--budget"), default=60)
    cal.add_argument("--drafter", help="EAGLE-3 checkpoint directory (graft, eagle3_pruned)")
    cal.add_argument("--seed", type=int, default=0, help="draws graft's warm-up prompts")
    cal.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto")
    cal.add_argument("--out", required=True, help="file to write the state to (load it with --method-state)")
    cal.add_argument("--tree-out", metavar="FILE", help="token_recycling: warm up on the whole 81-slot tree, count "
                     "the nodes the target accepts, and write the --budget-slot subtree they choose (for --tr-tree)")
    cal.add_argument("--tree-template", choices=("tr-2.2.2", "tr-deep"), help="with --tree-out: the tree counted on "
                     "(default tr-2.2.2, 81 slots; tr-deep: 2.2.2 plus deeper paths, 109 slots, --budget up to 109)")
    train = sub.add_parser("train", help="drafter training pipeline")
    train_sub = train.add_subparsers(dest="train_command", required=True, parser_class=_Parser)
    dist = train_sub.add_parser("distill", help="self-distillation data: the target answers ShareGPT (or a "
                                "benchmark's) prompts")
    dist.add_argument("--model", default="smollm2-135m")
    dist.add_argument("--out", required=True)
    dist.add_argument("--dataset", default="sharegpt", type=_dataset_names,
                      help="where the prompts come from (a benchmark's with its bench instruction); several, "
                      "comma-separated: one model load, each dataset's answers in --out/<dataset>")
    dist.add_argument("--skip", type=int, default=0,
                      help="records passed over first, in file order: keeps a bench's first --limit prompts out")
    dist.add_argument("--after", type=_data_folders, default=None, metavar="DATA",
                      help="distillation folders (comma-separated) to start past: skip every record up to the last "
                      "one they answered a turn of, so the new answers share no conversation with theirs (data a "
                      "drafter trained on them has never seen); --skip still applies when larger")
    dist.add_argument("--turns", choices=("first", "followups"), default="first",
                      help="first: each record's first user turn; followups: every later user turn, after the "
                      "conversation before it (ShareGPT only; more prompts, longer contexts)")
    dist.add_argument("--num-prompts", type=_count_or_all("--num-prompts"), default=1000,
                      help="how many prompts to answer, or `all` (every one past --skip that fits)")
    dist.add_argument("--max-prompt-tokens", type=_positive_int("--max-prompt-tokens"), default=512)
    dist.add_argument("--max-new-tokens", type=_positive_int("--max-new-tokens"), default=256)
    dist.add_argument("--batch-size", type=_positive_int("--batch-size"), default=8)
    dist.add_argument("--shard-size", type=_positive_int("--shard-size"), default=64)
    dist.add_argument("--seed", type=int, default=0)
    dist.add_argument("--temperature", type=float, default=0.0)
    dist.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto")
    e3 = train_sub.add_parser("eagle3", help="train an EAGLE-3 drafter (training-time test) on distillation data")
    _add_train_run_arguments(e3, lr=3e-4)
    e3.add_argument("--draft-vocab-size", type=_positive_int("--draft-vocab-size"), default=8192,
                    help="most frequent answer tokens (capped at the target vocabulary)")
    e3.add_argument("--ttt-steps", type=_positive_int("--ttt-steps"), default=7, help="unrolled draft depths")
    _add_train_checkpoint_arguments(e3)
    ev = train_sub.add_parser("evaluate", help="score exported DFlash/Domino drafters on distilled answers: "
                              "held-out accept length and the decode loop's walk MAT")
    ev.add_argument("--model", default="smollm2-135m", help="the target the drafters serve")
    ev.add_argument("--data", required=True, type=_data_folders,
                    help="folder written by `jspec train distill` (several: comma-separated, read as one)")
    ev.add_argument("--drafter", action="append", required=True, metavar="DIR",
                    help="an exported drafter folder (repeat to compare; ratios are against the first)")
    ev.add_argument("--held-out", type=_positive_int("--held-out"), default=None, metavar="N",
                    help="score the N records a training run on --data held out (its --eval-records, --seed)")
    ev.add_argument("--limit", type=_positive_int("--limit"), default=None, help="score the first LIMIT records")
    ev.add_argument("--seq-len", type=_positive_int("--seq-len"), default=1024)
    ev.add_argument("--batch-size", type=_positive_int("--batch-size"), default=8)
    ev.add_argument("--anchors-per-seq", type=_positive_int("--anchors-per-seq"), default=128)
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--compute-dtype", default="auto", choices=("auto", "bfloat16", "float32"),
                    help="the drafters' matmuls and activations (auto: float32 on CPU, else bfloat16)")
    ev.add_argument("--target-dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                    help="the target's forward (auto: bfloat16 on GPU/TPU, float32 on CPU)")
    ev.add_argument("--out", metavar="FILE", help="also write the scores as JSON")
    for name, what in (("dflash", "a DFlash block drafter"), ("domino", "a Domino drafter (DFlash backbone + GRU "
                                                                         "correction head)")):
        _add_block_train_parser(train_sub.add_parser(name, help=f"train {what} on distillation data"), name)
    add_assets_parser(sub)
    return parser


def _count_or_all(name: str):
    count = _positive_int(name)
    return lambda text: None if text == "all" else count(text)


def _dataset_names(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise argparse.ArgumentTypeError("names no dataset")
    for name in names:
        if name not in DATASETS:
            raise argparse.ArgumentTypeError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")
    if len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"names a dataset twice: {value!r}")
    return names


def _data_folders(value: str) -> list[pathlib.Path]:
    folders = [pathlib.Path(v.strip()) for v in value.split(",") if v.strip()]
    if not folders:
        raise argparse.ArgumentTypeError("names no folder")
    return folders


def _add_train_run_arguments(p: argparse.ArgumentParser, lr: float) -> None:
    """Data, run folder, optimisation and MLP-width flags shared by every `train` drafter command."""
    p.add_argument("--model", default="smollm2-135m", help="the target the drafter serves")
    p.add_argument("--data", type=_data_folders,
                   help="folder written by `jspec train distill` (several: comma-separated, read as one)")
    p.add_argument("--train-only-data", type=_data_folders, default=None, metavar="DATA",
                   help="more folders whose records only train: the held-out records still come from --data alone, "
                   "so a run on more data is scored on the same records as one on --data")
    p.add_argument("--held-out-only", action="store_true",
                   help="take only the held-out records from --data (those a run on it holds out: same "
                   "--eval-records and --seed) and train on --train-only-data alone: e.g. a Domino head on answers "
                   "its frozen backbone never saw, scored on the backbone's held-out records")
    p.add_argument("--out", required=True, help="run folder: checkpoints, metrics, plot, drafter/")
    p.add_argument("--steps", type=_positive_int("--steps"), default=2000)
    p.add_argument("--batch-size", type=_positive_int("--batch-size"), default=8, help="packed rows per step")
    p.add_argument("--seq-len", type=_positive_int("--seq-len"), default=1024, help="tokens per packed row")
    p.add_argument("--lr", type=float, default=lr, help="peak AdamW learning rate")
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--schedule", choices=("cosine", "linear"), default="cosine", help="decay after warm-up")
    p.add_argument("--intermediate-size", type=_positive_int("--intermediate-size"), default=None,
                   help="drafter MLP width (default: the target's)")
    p.add_argument("--compute-dtype", default="auto", choices=("auto", "bfloat16", "float32"),
                   help="the drafter's matmuls and activations; weights and AdamW stay float32 (auto: float32 on "
                        "CPU, else bfloat16)")


def _add_train_checkpoint_arguments(p: argparse.ArgumentParser) -> None:
    """Evaluation, logging, checkpoint/resume and export flags shared by every `train` drafter command."""
    p.add_argument("--eval-records", type=int, default=64, help="records held out for evaluation")
    p.add_argument("--eval-every", type=_positive_int("--eval-every"), default=200)
    p.add_argument("--save-every", type=_positive_int("--save-every"), default=500)
    p.add_argument("--log-every", type=_positive_int("--log-every"), default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16", help="exported weights")
    p.add_argument("--target-dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                   help="the frozen target's forward (auto: bfloat16 on GPU/TPU, float32 on CPU)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out (a fresh start if it has none)")
    p.add_argument("--stop-at", type=_positive_int("--stop-at"), default=None,
                   help="checkpoint and stop after this step (continue with --resume)")
    p.add_argument("--time-limit", type=float, default=None,
                   help="checkpoint and stop after this many seconds (continue with --resume)")
    p.add_argument("--export", action="store_true", help="only export the latest checkpoint to OUT/drafter")


def _add_block_train_parser(p: argparse.ArgumentParser, command: str) -> None:
    """`train dflash` / `train domino`: the flags of `train eagle3` plus the block recipe's (and Domino's head)."""
    _add_train_run_arguments(p, lr=6e-4)
    p.add_argument("--block-size", type=int, default=16, help="block tokens: the anchor + B - 1 masks")
    p.add_argument("--num-layers", type=_positive_int("--num-layers"), default=5,
                   help="draft layers (= tapped target layers)")
    p.add_argument("--anchors-per-seq", type=_positive_int("--anchors-per-seq"), default=128,
                   help="blocks trained per packed row")
    p.add_argument("--gamma-decay", type=float, default=7.0, help="position weights exp(-(k-1)/gamma)")
    p.add_argument("--position-weights", choices=("decay", "reach"), default="decay",
                   help="decay: exp(-(k-1)/gamma) (the paper's); reach: each draft weighted by the probability that "
                   "the drafter's own earlier drafts are right (docs/training.md)")
    p.add_argument("--init-layers", choices=("random", "target"), default="random",
                   help="target: start the draft layers as copies of the target's last decoder layers")
    if command == "domino":
        p.add_argument("--gru-hidden", type=_positive_int("--gru-hidden"), default=1024, help="GRU state width")
        p.add_argument("--rank", type=_positive_int("--rank"), default=256, help="low-rank correction width")
        p.add_argument("--curriculum-fraction", type=float, default=1.0,
                       help="fraction of the steps over which the base-loss share falls to 0")
        p.add_argument("--curriculum-start", type=float, default=1.0,
                       help="base-loss share at step 0 (below 1 when --init-from continues a trained head)")
        p.add_argument("--no-curriculum", action="store_true", help="final-logit loss only from the start")
        p.add_argument("--ttt", action="store_true",
                       help="the GRU reads the drafter's own greedy drafts (training-time test), not the data")
        p.add_argument("--head-off", action="store_true", help="no correction head: the plain DFlash recipe")
        p.add_argument("--init-backbone", metavar="DIR",
                       help="start the backbone from a DFlash/Domino checkpoint (e.g. RUN/drafter)")
        p.add_argument("--freeze-backbone", action="store_true",
                       help="train the head alone; the backbone (from --init-backbone or --init-from) stays as it "
                       "is, and the curriculum does not apply")
    p.add_argument("--init-from", metavar="DIR",
                   help="continue training an exported drafter of this kind and shape (e.g. an earlier RUN/drafter):"
                   " every weight starts from it; AdamW and the learning-rate schedule start afresh")
    _add_train_checkpoint_arguments(p)


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
    options = {**_budget_option(args.method, args.budget), **_fixed_split_option(args.method, args.fixed_split),
               **_tail_options((args.method,), args), **_candidates_option(args.method, args.candidates, args.candidate_chunk),
               **_draft_model_options(args.method, args.draft_confidence, args.draft_top_k)}
    if args.tr_tree is not None:
        if args.method != "token_recycling":
            raise UserError("--tr-tree applies to --method token_recycling only")
        options |= _tr_tree_option(args.tr_tree)
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
    get_method(args.method, **_drafter_placeholder(args.method), **options)
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
    dtype = args.dtype if args.dtype != "auto" else ("float32" if jax.default_backend() == "cpu" else "bfloat16")
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


def run_bench(args) -> None:

    import jax

    from jspec.bench.report import write_report
    from jspec.bench.runner import BenchConfig, run
    from jspec.methods import get_method
    from jspec.models.loading import load_model
    from jspec.sampling import Sampling

    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    from jspec.bench.runner import method_of

    for m in methods:
        get_method(method_of(m), **_drafter_placeholder(method_of(m)))
    if "graft_fixed" in methods:
        get_method("graft", fixed_split=args.fixed_split)
    if {"domino_topk", "domino_block", "domino_block_stop"} & set(methods):
        get_method("domino", candidates=args.candidates)
    headed = {"domino", "domino_topk", "domino_block", "domino_block_stop"}  # labels drafting through Domino's head
    if args.head_drafts is not None and not headed & set(methods):
        raise UserError("--head-drafts applies to the domino, domino_topk, domino_block and domino_block_stop methods "
                        "only")
    head_stop = {} if args.head_stop is None else {"head_stop": args.head_stop}  # else BenchConfig's default
    if head_stop and "domino_block_stop" not in methods:
        raise UserError("--head-stop applies to the domino_block_stop method only")
    if "domino_block_stop" in methods:
        get_method("domino", candidates=args.candidates, head_stop=head_stop.get("head_stop", BenchConfig.head_stop))
    if "draft_model_adaptive" in methods:
        get_method("draft_model", min_confidence=args.draft_confidence)
    if "draft_model_tree" in methods:
        get_method("draft_model", top_k=args.draft_top_k)
    tail_options = _tail_options(methods, args)
    if tail_options:
        get_method("graft_tail", **tail_options)
    tr_tree = _tr_tree_option(args.tr_tree)
    if ("token_recycling_tuned" in methods) != bool(tr_tree):
        raise UserError("token_recycling_tuned and --tr-tree go together")
    if tr_tree:
        get_method("token_recycling", **tr_tree)
    method_states = []
    for spec in args.method_state:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise UserError(f"--method-state takes METHOD=PATH, got {spec!r}")
        if name not in methods:
            raise UserError(f"--method-state names {name!r}, which is not among --methods")
        method_states.append((name, path))
    block_drafters = {"dflash": args.dflash_drafter, "domino": args.domino_drafter, "domino_topk": args.domino_drafter,
                      "domino_block": args.domino_drafter, "domino_block_stop": args.domino_drafter,
                      "domino_headless": args.domino_drafter, "graft_tail": args.dflash_drafter or args.domino_drafter}
    for m in set(methods) & set(block_drafters):
        if not block_drafters[m]:
            raise UserError(f"{m} needs a checkpoint directory: "
                            f"--{'domino' if m.startswith('domino') else 'dflash'}-drafter")
    datasets = tuple(d.strip() for d in args.dataset.split(",") if d.strip())
    for d in datasets:
        if d not in DATASETS:
            raise UserError(f"unknown dataset {d!r}; expected one of {', '.join(DATASETS)}")
    dtype = args.dtype if args.dtype != "auto" else ("float32" if jax.default_backend() == "cpu" else "bfloat16")
    model = load_model(args.model, dtype=dtype)
    cfg = BenchConfig(methods=methods, datasets=datasets, limit=args.limit, max_new_tokens=args.max_new_tokens,
                      sampling=Sampling(temperature=args.temperature, top_p=args.top_p), seed=args.seed,
                      drafter=args.drafter, eagle3_drafter=args.eagle3_drafter, fixed_split=args.fixed_split,
                      candidates=args.candidates, candidate_chunk=args.candidate_chunk or 0,
                      select_kernel=not args.xla_select, full_block=args.full_block,
                      head_drafts=args.head_drafts or 0, **head_stop,
                      draft_confidence=args.draft_confidence,
                      draft_top_k=args.draft_top_k,
                      method_states=tuple(method_states), graft_tail_options=tuple(tail_options.items()),
                      dflash_drafter=args.dflash_drafter, domino_drafter=args.domino_drafter,
                      tr_tree=tr_tree.get("tree", ()))
    out = pathlib.Path(args.out)
    run(model, cfg, out)
    device = jax.devices()[0].device_kind
    header = (f"# jspec bench: {model.name} ({dtype}) on {device}, {time.strftime('%Y-%m-%d')}\n\n"
              f"`jspec {shlex.join(args.argv)}` (every option as given, the rest at its default), batch 1; "
              "speedup is measured against vanilla in the same run.")
    rows = write_report(out, header)
    width = max(len(row["method"]) for row in rows)
    for row in rows:
        print(f"{row['dataset']:10s} {row['method']:{width}s} MAT {row['mat']:.2f}  {row['tok_per_s']:8.1f} tok/s  "
              f"speedup {row['speedup']:.2f}x" + ("" if row["identical"] is None else
                                                   f"  identical {100 * row['identical']:.0f}%"))


def run_train(args) -> None:

    import jax

    if args.train_command == "eagle3":
        return run_train_eagle3(args)
    if args.train_command in ("dflash", "domino"):
        return run_train_dflash(args)
    if args.train_command == "evaluate":
        return run_train_evaluate(args)

    from jspec.models.loading import load_model
    from jspec.train.distill import DistillConfig, distill, records_past

    skip = args.skip
    if args.after:
        if len(args.dataset) > 1:
            raise UserError("--after starts past the records of one dataset: pass one --dataset with it")
        skip = max(skip, records_past(args.after, args.dataset[0]))
        print(f"jspec: --after: starting past the first {skip} {args.dataset[0]} records", file=sys.stderr)
    cfgs = [DistillConfig(num_prompts=args.num_prompts, max_prompt_tokens=args.max_prompt_tokens,
                          max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, shard_size=args.shard_size,
                          seed=args.seed, temperature=args.temperature, dataset=name, skip=skip,
                          turns=args.turns)
            for name in args.dataset]
    dtype = args.dtype if args.dtype != "auto" else ("float32" if jax.default_backend() == "cpu" else "bfloat16")
    model = load_model(args.model, dtype=dtype)
    out = pathlib.Path(args.out)
    for cfg in cfgs:  # one model load and, the shapes being equal, one compilation for all of them
        folder = out if len(cfgs) == 1 else out / cfg.dataset
        n = distill(model, folder, cfg)
        print(f"jspec: {n} distillation records in {folder}", file=sys.stderr)


def run_train_evaluate(args) -> None:

    import jax

    from jspec.models.loading import load_model
    from jspec.train.evaluate import EvalConfig, evaluate_drafters, format_table

    target_dtype, compute_dtype = (
        ("float32" if jax.default_backend() == "cpu" else "bfloat16") if d == "auto" else d
        for d in (args.target_dtype, args.compute_dtype))
    cfg = EvalConfig(seq_len=args.seq_len, batch_size=args.batch_size, anchors_per_seq=args.anchors_per_seq,
                     held_out=args.held_out, limit=args.limit, seed=args.seed, compute_dtype=compute_dtype)
    model = load_model(args.model, dtype=target_dtype)
    result = evaluate_drafters(model, args.data, [pathlib.Path(d) for d in args.drafter], cfg)
    print(format_table(result))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


def run_train_eagle3(args) -> None:

    import jax

    from jspec.models.loading import load_model
    from jspec.train.eagle3 import Eagle3TrainConfig, export_latest, train_eagle3

    out = pathlib.Path(args.out)
    target_dtype, compute_dtype = (
        ("float32" if jax.default_backend() == "cpu" else "bfloat16") if d == "auto" else d
        for d in (args.target_dtype, args.compute_dtype))
    if args.export:
        model = load_model(args.model, dtype=target_dtype)
        step, size = export_latest(model, out, args.dtype)
        print(f"jspec: exported step {step} to {out / 'drafter'} ({size / 1e6:.1f} MB of weights)", file=sys.stderr)
        return
    if not args.data:
        raise UserError("--data is required to train (or pass --export)")
    cfg = Eagle3TrainConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr,
                            warmup_steps=args.warmup_steps, schedule=args.schedule,
                            draft_vocab_size=args.draft_vocab_size, ttt_steps=args.ttt_steps,
                            eval_records=args.eval_records, eval_every=args.eval_every, save_every=args.save_every,
                            log_every=args.log_every, seed=args.seed, intermediate_size=args.intermediate_size,
                            compute_dtype=compute_dtype)
    if args.time_limit is not None and not args.time_limit > 0:
        raise UserError(f"--time-limit must be > 0 seconds, got {args.time_limit}")
    model = load_model(args.model, dtype=target_dtype)
    result = train_eagle3(model, args.data, out, cfg, resume=args.resume, export_dtype=args.dtype,
                          stop_at=args.stop_at, time_limit=args.time_limit, train_only=args.train_only_data,
                          held_out_only=args.held_out_only)
    if result["finished"]:
        print(f"jspec: exported EAGLE-3 drafter to {out / 'drafter'} ({result['size_bytes'] / 1e6:.1f} MB of "
              "weights)", file=sys.stderr)
    else:
        print(f"jspec: stopped at step {result['step']} of {cfg.steps}; rerun with --resume to continue",
              file=sys.stderr)


def run_train_dflash(args) -> None:

    import jax

    from jspec.models.loading import load_model
    from jspec.train.dflash import DFlashTrainConfig, export_latest, train_dflash

    out = pathlib.Path(args.out)
    target_dtype, compute_dtype = (
        ("float32" if jax.default_backend() == "cpu" else "bfloat16") if d == "auto" else d
        for d in (args.target_dtype, args.compute_dtype))
    if args.export:
        model = load_model(args.model, dtype=target_dtype)
        step, size = export_latest(model, out, args.dtype, command=args.train_command)
        print(f"jspec: exported step {step} to {out / 'drafter'} ({size / 1e6:.1f} MB of weights)", file=sys.stderr)
        return
    if not args.data:
        raise UserError("--data is required to train (or pass --export)")
    domino = {}
    if args.train_command == "domino":
        domino = dict(domino=not args.head_off, gru_hidden=args.gru_hidden, rank=args.rank,
                      curriculum=not args.no_curriculum, curriculum_fraction=args.curriculum_fraction,
                      curriculum_start=args.curriculum_start, ttt=args.ttt,
                      init_backbone=args.init_backbone, freeze_backbone=args.freeze_backbone)
    cfg = DFlashTrainConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr,
                            warmup_steps=args.warmup_steps, schedule=args.schedule, block_size=args.block_size,
                            num_layers=args.num_layers, anchors_per_seq=args.anchors_per_seq,
                            gamma_decay=args.gamma_decay, position_weights=args.position_weights,
                            intermediate_size=args.intermediate_size,
                            init_layers=args.init_layers, init_from=args.init_from,
                            eval_records=args.eval_records, eval_every=args.eval_every, save_every=args.save_every,
                            log_every=args.log_every, seed=args.seed, compute_dtype=compute_dtype, **domino)
    if args.time_limit is not None and not args.time_limit > 0:
        raise UserError(f"--time-limit must be > 0 seconds, got {args.time_limit}")
    model = load_model(args.model, dtype=target_dtype)
    result = train_dflash(model, args.data, out, cfg, resume=args.resume, export_dtype=args.dtype,
                          stop_at=args.stop_at, time_limit=args.time_limit, train_only=args.train_only_data,
                          held_out_only=args.held_out_only)
    if result["finished"]:
        kind = "Domino" if cfg.domino else "DFlash"
        print(f"jspec: exported {kind} drafter to {out / 'drafter'} ({result['size_bytes'] / 1e6:.1f} MB of weights)",
              file=sys.stderr)
    else:
        print(f"jspec: stopped at step {result['step']} of {cfg.steps}; rerun with --resume to continue",
              file=sys.stderr)


def run_calibrate(args) -> None:
    import jax
    from tqdm import tqdm

    from jspec.bench.datasets import load_prompts
    from jspec.methods import build, get_method
    from jspec.models.loading import load_model
    from jspec.runner import run_batch
    from jspec.sampling import Sampling

    if args.tree_out and args.method != "token_recycling":
        raise UserError("--tree-out applies to --method token_recycling only")
    if args.tree_template and not args.tree_out:
        raise UserError("--tree-template applies with --tree-out only")
    # --tree-out: --budget sizes the chosen subtree (checked against the counted tree), not the warm-up's tree
    budget = {} if args.tree_out else _budget_option(args.method, args.budget)
    if args.tree_out:
        from jspec.retrieval.templates import template

        base = template(args.tree_template or "tr-2.2.2")
        if args.budget > base.size:
            raise UserError(f"--budget {args.budget} is larger than the {base.size}-slot "
                            f"{_tree_template_name(args)} tree")
    get_method(args.method, **_drafter_placeholder(args.method), **budget)
    dtype = args.dtype if args.dtype != "auto" else ("float32" if jax.default_backend() == "cpu" else "bfloat16")
    model = load_model(args.model, dtype=dtype)
    method, params = build(args.method, model, args.drafter, **budget)
    encoded = (model.tokenizer.encode_chat([{"role": "user", "content": r["prompt"]}])
               for r in load_prompts("sharegpt", 20 * args.warmup))
    pool = [ids for ids in encoded if len(ids) <= 1024]  # long conversations would size the cache
    if args.method in ("graft", "eagle3_pruned"):
        from jspec.methods.graft import calibrate

        state, stats = calibrate(model, method, params, pool, warmup=args.warmup, max_new_tokens=args.max_new_tokens,
                                 seed=args.seed)
        method.save_state(state, args.out)
        taus = ", ".join(f"tau_{d} = {t:.3f}" for d, t in zip(method.checkpoints, state.thresholds.tolist()))
        print(f"jspec: {args.method} thresholds from {len(stats['accepted'])} dense-tree steps: {taus}; saved with "
              f"the {'adjacency matrix ' if state.adjacency is not None else ''}to {args.out}", file=sys.stderr)
        return
    prompts = pool[: args.warmup]
    if not prompts:
        raise UserError("no ShareGPT prompt of at most 1024 tokens to warm up on")
    if args.tree_out:
        _calibrate_tree(args, model, method, prompts)
        return
    width = max(map(len, prompts))  # one padded width and cache length: one compilation for every prompt
    state = None
    for i, ids in enumerate(tqdm(prompts, desc="warm-up", unit="prompt")):
        _, state = run_batch(model, method, [ids], max_new_tokens=args.max_new_tokens, sampling=Sampling(), seed=i,
                             max_cache_len=width + args.max_new_tokens + 128, method_params=params,
                             method_state=state, pad_to=width)
    method.save_state(state, args.out)
    print(f"jspec: saved {args.method} state after {len(prompts)} ShareGPT prompts to {args.out}", file=sys.stderr)


def _tree_template_name(args) -> str:
    return args.tree_template or "tr-2.2.2"


def _calibrate_tree(args, model, method, prompts: list[list[int]]) -> None:
    """--tree-out: the warm-up decodes on the counted tree (--tree-template), counting accepted nodes; the matrix it
    leaves is saved as usual (it does not depend on the tree it is later used with)."""
    from jspec.retrieval.templates import template
    from jspec.retrieval.tree_stats import count_accepted_nodes, tree_report

    base = template(_tree_template_name(args))
    counts, steps, matrix = count_accepted_nodes(model, prompts, max_new_tokens=args.max_new_tokens, base=base,
                                                 desc=f"warm-up ({base.size}-slot tree)")
    report = tree_report(counts, steps, args.budget, base=base, model=args.model, dataset="sharegpt",
                         prompts=len(prompts), template=_tree_template_name(args))
    try:
        pathlib.Path(args.tree_out).write_text(json.dumps(report, indent=1), encoding="utf-8")
    except OSError as e:
        raise UserError(f"--tree-out {args.tree_out}: {e.strerror or e}") from None
    method.save_state(matrix, args.out)
    print(f"jspec: {steps} steps on {len(prompts)} ShareGPT prompts: {report['mat_all']:.3f} tokens accepted per "
          f"step with the {base.size}-slot tree; the {args.budget}-slot BFS prefix would accept "
          f"{report['mat_prefix']:.3f}, the "
          f"chosen subtree {report['mat_chosen']:.3f} (written to {args.tree_out}); state saved to {args.out}",
          file=sys.stderr)


def _budget_option(method: str, budget: int) -> dict:
    """--budget sizes the tree of the methods whose tree is a budget (token_recycling, graft, eagle3_pruned); the
    others are fixed."""
    return {"budget": budget} if method in ("token_recycling", "graft", "eagle3_pruned") else {}


def _fixed_split_option(method: str, fixed_split: int | None) -> dict:
    if fixed_split is None:
        return {}
    if method != "graft":
        raise UserError("--fixed-split applies to --method graft only")
    return {"fixed_split": fixed_split}


def _tr_tree_option(path: str | None) -> dict:
    """token_recycling's `tree` (and the `budget` it sets) from a --tr-tree file."""
    if path is None:
        return {}
    from jspec.retrieval.templates import read_tree

    tree = read_tree(path)
    return {"tree": tree, "budget": len(tree) + 1}


def _candidates_option(method: str, candidates: int | None, chunk: int | None = None) -> dict:
    if chunk is not None and candidates is None:
        raise UserError("--candidate-chunk approximates Domino's candidates: it needs --candidates")
    if candidates is None:
        return {}
    if method not in ("domino", "graft_tail"):
        raise UserError("--candidates applies to --method domino and graft_tail only")
    return {"candidates": candidates, **({"candidate_chunk": chunk} if chunk else {})}


def _draft_model_options(method: str, confidence: float | None, top_k: int | None) -> dict:
    options = {k: v for k, v in (("min_confidence", confidence), ("top_k", top_k)) if v is not None}
    if options and method != "draft_model":
        raise UserError("--draft-confidence and --draft-top-k apply to --method draft_model only")
    return options


def _add_domino_arguments(parser, who: str, candidates: int | None) -> None:
    """--candidates, --candidate-chunk and --full-block, for `who` (the methods or bench labels they apply to)."""
    default = "the full vocabulary" if candidates is None else candidates
    parser.add_argument("--candidates", type=_positive_int("--candidates"), default=candidates, metavar="K",
                        help=f"{who}: correct only the K highest base logits of each draft row (default: {default})")
    parser.add_argument("--candidate-chunk", type=_positive_int("--candidate-chunk"), default=None, metavar="C",
                        help=f"{who}: approximate candidates, the best token of each of the K chunks of C tokens with "
                        "the highest maxima (one sort instead of two; other drafts, the same output)")
    parser.add_argument("--full-block", action="store_true",
                        help="block drafters with a shift_label (Domino) checkpoint: also draft the block's last row, "
                        "for the official B + 1 verify chain (default: B, the paper's 16-token budget)")
    parser.add_argument("--head-drafts", type=_positive_int("--head-drafts"), default=None, metavar="M",
                        help="Domino: only the first M drafts of a block go through the correction head (its GRU runs "
                        "M - 1 sequential steps); later drafts take the base argmax (default: all)")


def _add_tail_arguments(parser) -> None:
    parser.add_argument("--tail-threshold", type=float, default=None, metavar="P",
                        help="graft_tail: keep the block's drafts while their cumulative confidence stays >= P")
    parser.add_argument("--tail", choices=("chain", "tree"), default=None,
                        help="graft_tail: retrieve the tail as a rank-0 chain or the 2.2.2 tree")


def _tail_options(methods: tuple[str, ...], args) -> dict:
    options = {k: v for k, v in (("threshold", args.tail_threshold), ("tail", args.tail)) if v is not None}
    if options and "graft_tail" not in methods:
        raise UserError("--tail-threshold and --tail apply to the graft_tail method only")
    return options


def _drafter_placeholder(method: str) -> dict:
    return {"drafter": None} if method == "draft_model" else {}


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


def _check_attention_choice() -> None:
    """JSPEC_ATTENTION is read deep inside the model's trace: a bad value fails here, with one line."""
    from pallas_kernels.tree_attention import choose_kernel

    try:
        choose_kernel()
    except ValueError as e:
        raise UserError(str(e)) from None


def main(argv: list[str] | None = None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser().parse_args(argv)
        args.argv = argv  # the command line as given, for the reports
        if args.command != "assets":
            _check_attention_choice()
        if args.command == "generate":
            run_generate(args)
        elif args.command == "bench":
            run_bench(args)
        elif args.command == "report":
            from jspec.bench.report import merge_runs

            merge_runs([pathlib.Path(r) for r in args.runs], pathlib.Path(args.out))
            print(f"jspec: merged {len(args.runs)} runs into {args.out}/summary.md")
        elif args.command == "calibrate":
            run_calibrate(args)
        elif args.command == "train":
            run_train(args)
        else:
            from jspec.assets_cli import run_assets

            run_assets(args)
    except UserError as e:
        print(f"jspec: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("jspec: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
