"""`jspec train distill | eagle3 | dflash | domino | evaluate`: the drafter training pipeline."""

import argparse
import json
import pathlib
import sys
from collections.abc import Callable
from typing import Any

from jspec.cli.args import Parser, count_or_all, data_folders, dataset_names, positive_int, resolve_dtype
from jspec.errors import UserError


def add_train_parser(sub) -> None:
    train = sub.add_parser("train", help="drafter training pipeline")
    train_sub = train.add_subparsers(dest="train_command", required=True, parser_class=Parser)
    dist = train_sub.add_parser("distill", help="self-distillation data: the target answers ShareGPT (or a "
                                "benchmark's) prompts")
    dist.add_argument("--model", default="smollm2-135m")
    dist.add_argument("--out", required=True)
    dist.add_argument("--dataset", default="sharegpt", type=dataset_names,
                      help="where the prompts come from (a benchmark's with its bench instruction); several, "
                      "comma-separated: one model load, each dataset's answers in --out/<dataset>")
    dist.add_argument("--skip", type=int, default=0,
                      help="records passed over first, in file order: keeps a bench's first --limit prompts out")
    dist.add_argument("--after", type=data_folders, default=None, metavar="DATA",
                      help="distillation folders (comma-separated) to start past: skip every record up to the last "
                      "one they answered a turn of, so the new answers share no conversation with theirs (data a "
                      "drafter trained on them has never seen); --skip still applies when larger")
    dist.add_argument("--turns", choices=("first", "followups"), default="first",
                      help="first: each record's first user turn; followups: every later user turn, after the "
                      "conversation before it (ShareGPT only; more prompts, longer contexts)")
    dist.add_argument("--num-prompts", type=count_or_all("--num-prompts"), default=1000,
                      help="how many prompts to answer, or `all` (every one past --skip that fits)")
    dist.add_argument("--max-prompt-tokens", type=positive_int("--max-prompt-tokens"), default=512)
    dist.add_argument("--max-new-tokens", type=positive_int("--max-new-tokens"), default=256)
    dist.add_argument("--batch-size", type=positive_int("--batch-size"), default=8)
    dist.add_argument("--shard-size", type=positive_int("--shard-size"), default=64)
    dist.add_argument("--seed", type=int, default=0)
    dist.add_argument("--temperature", type=float, default=0.0)
    dist.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto")
    dist.set_defaults(run=run_distill)
    e3 = train_sub.add_parser("eagle3", help="train an EAGLE-3 drafter (training-time test) on distillation data")
    _add_train_run_arguments(e3, lr=3e-4)
    e3.add_argument("--draft-vocab-size", type=positive_int("--draft-vocab-size"), default=8192,
                    help="most frequent answer tokens (capped at the target vocabulary)")
    e3.add_argument("--ttt-steps", type=positive_int("--ttt-steps"), default=7, help="unrolled draft depths")
    _add_train_checkpoint_arguments(e3)
    e3.set_defaults(run=run_train_eagle3)
    ev = train_sub.add_parser("evaluate", help="score exported DFlash/Domino drafters on distilled answers: "
                              "held-out accept length and the decode loop's walk MAT")
    ev.add_argument("--model", default="smollm2-135m", help="the target the drafters serve")
    ev.add_argument("--data", required=True, type=data_folders,
                    help="folder written by `jspec train distill` (several: comma-separated, read as one)")
    ev.add_argument("--drafter", action="append", required=True, metavar="DIR",
                    help="an exported drafter folder (repeat to compare; ratios are against the first)")
    ev.add_argument("--held-out", type=positive_int("--held-out"), default=None, metavar="N",
                    help="score the N records a training run on --data held out (its --eval-records, --seed)")
    ev.add_argument("--limit", type=positive_int("--limit"), default=None, help="score the first LIMIT records")
    ev.add_argument("--seq-len", type=positive_int("--seq-len"), default=1024)
    ev.add_argument("--batch-size", type=positive_int("--batch-size"), default=8)
    ev.add_argument("--anchors-per-seq", type=positive_int("--anchors-per-seq"), default=128)
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--compute-dtype", default="auto", choices=("auto", "bfloat16", "float32"),
                    help="the drafters' matmuls and activations (auto: float32 on CPU, else bfloat16)")
    ev.add_argument("--target-dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                    help="the target's forward (auto: bfloat16 on GPU/TPU, float32 on CPU)")
    ev.add_argument("--out", metavar="FILE", help="also write the scores as JSON")
    ev.set_defaults(run=run_train_evaluate)
    for name, what in (("dflash", "a DFlash block drafter"), ("domino", "a Domino drafter (DFlash backbone + GRU "
                                                                         "correction head)")):
        block = train_sub.add_parser(name, help=f"train {what} on distillation data")
        _add_block_train_parser(block, name)
        block.set_defaults(run=run_train_dflash)


def _add_train_run_arguments(p: argparse.ArgumentParser, lr: float) -> None:
    """Data, run folder, optimisation and MLP-width flags shared by every `train` drafter command."""
    p.add_argument("--model", default="smollm2-135m", help="the target the drafter serves")
    p.add_argument("--data", type=data_folders,
                   help="folder written by `jspec train distill` (several: comma-separated, read as one)")
    p.add_argument("--train-only-data", type=data_folders, default=None, metavar="DATA",
                   help="more folders whose records only train: the held-out records still come from --data alone, "
                   "so a run on more data is scored on the same records as one on --data")
    p.add_argument("--held-out-only", action="store_true",
                   help="take only the held-out records from --data (those a run on it holds out: same "
                   "--eval-records and --seed) and train on --train-only-data alone: e.g. a Domino head on answers "
                   "its frozen backbone never saw, scored on the backbone's held-out records")
    p.add_argument("--out", required=True, help="run folder: checkpoints, metrics, plot, drafter/")
    p.add_argument("--steps", type=positive_int("--steps"), default=2000)
    p.add_argument("--batch-size", type=positive_int("--batch-size"), default=8, help="packed rows per step")
    p.add_argument("--seq-len", type=positive_int("--seq-len"), default=1024, help="tokens per packed row")
    p.add_argument("--lr", type=float, default=lr, help="peak AdamW learning rate")
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--schedule", choices=("cosine", "linear"), default="cosine", help="decay after warm-up")
    p.add_argument("--intermediate-size", type=positive_int("--intermediate-size"), default=None,
                   help="drafter MLP width (default: the target's)")
    p.add_argument("--compute-dtype", default="auto", choices=("auto", "bfloat16", "float32"),
                   help="the drafter's matmuls and activations; weights and AdamW stay float32 (auto: float32 on "
                        "CPU, else bfloat16)")


def _add_train_checkpoint_arguments(p: argparse.ArgumentParser) -> None:
    """Evaluation, logging, checkpoint/resume and export flags shared by every `train` drafter command."""
    p.add_argument("--eval-records", type=int, default=64, help="records held out for evaluation")
    p.add_argument("--eval-every", type=positive_int("--eval-every"), default=200)
    p.add_argument("--save-every", type=positive_int("--save-every"), default=500)
    p.add_argument("--log-every", type=positive_int("--log-every"), default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16", help="exported weights")
    p.add_argument("--target-dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                   help="the frozen target's forward (auto: bfloat16 on GPU/TPU, float32 on CPU)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out (a fresh start if it has none)")
    p.add_argument("--stop-at", type=positive_int("--stop-at"), default=None,
                   help="checkpoint and stop after this step (continue with --resume)")
    p.add_argument("--time-limit", type=float, default=None,
                   help="checkpoint and stop after this many seconds (continue with --resume)")
    p.add_argument("--export", action="store_true", help="only export the latest checkpoint to OUT/drafter")


def _add_block_train_parser(p: argparse.ArgumentParser, command: str) -> None:
    """`train dflash` / `train domino`: the flags of `train eagle3` plus the block recipe's (and Domino's head)."""
    _add_train_run_arguments(p, lr=6e-4)
    p.add_argument("--block-size", type=int, default=16, help="block tokens: the anchor + B - 1 masks")
    p.add_argument("--num-layers", type=positive_int("--num-layers"), default=5,
                   help="draft layers (= tapped target layers)")
    p.add_argument("--anchors-per-seq", type=positive_int("--anchors-per-seq"), default=128,
                   help="blocks trained per packed row")
    p.add_argument("--gamma-decay", type=float, default=7.0, help="position weights exp(-(k-1)/gamma)")
    p.add_argument("--position-weights", choices=("decay", "reach"), default="decay",
                   help="decay: exp(-(k-1)/gamma) (the paper's); reach: each draft weighted by the probability that "
                   "the drafter's own earlier drafts are right (docs/training.md)")
    p.add_argument("--labels", choices=("data", "target"), default="data",
                   help="data: score each draft against the data token (the paper's); target: against the target's "
                   "whole next-token distribution there (soft labels; docs/training.md)")
    p.add_argument("--init-layers", choices=("random", "target"), default="random",
                   help="target: start the draft layers as copies of the target's last decoder layers")
    if command == "domino":
        p.add_argument("--gru-hidden", type=positive_int("--gru-hidden"), default=1024, help="GRU state width")
        p.add_argument("--rank", type=positive_int("--rank"), default=256, help="low-rank correction width")
        p.add_argument("--curriculum-fraction", type=float, default=1.0,
                       help="fraction of the steps over which the base-loss share falls to 0")
        p.add_argument("--curriculum-start", type=float, default=1.0,
                       help="base-loss share at step 0 (below 1 when --init-from continues a trained head)")
        p.add_argument("--curriculum-end", type=float, default=0.0,
                       help="base-loss share once the decay ends (0, as in SpecForge; above 0 keeps anchoring a "
                       "jointly trained backbone to its own predictions' loss)")
        p.add_argument("--no-curriculum", action="store_true", help="final-logit loss only from the start")
        p.add_argument("--head-lr-scale", type=float, default=1.0, metavar="X",
                       help="the head's learning rate as a multiple of --lr (the backbone keeps --lr)")
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


def run_distill(args) -> None:
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
    dtype = resolve_dtype(args.dtype)
    model = load_model(args.model, dtype=dtype)
    out = pathlib.Path(args.out)
    for cfg in cfgs:  # one model load and, the shapes being equal, one compilation for all of them
        folder = out if len(cfgs) == 1 else out / cfg.dataset
        n = distill(model, folder, cfg)
        print(f"jspec: {n} distillation records in {folder}", file=sys.stderr)


def run_train_evaluate(args) -> None:
    from jspec.models.loading import load_model
    from jspec.train.evaluate import EvalConfig, evaluate_drafters, format_table

    target_dtype, compute_dtype = map(resolve_dtype, (args.target_dtype, args.compute_dtype))
    cfg = EvalConfig(seq_len=args.seq_len, batch_size=args.batch_size, anchors_per_seq=args.anchors_per_seq,
                     held_out=args.held_out, limit=args.limit, seed=args.seed, compute_dtype=compute_dtype)
    model = load_model(args.model, dtype=target_dtype)
    result = evaluate_drafters(model, args.data, [pathlib.Path(d) for d in args.drafter], cfg)
    print(format_table(result))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


def run_train_eagle3(args) -> None:
    from jspec.train.eagle3 import Eagle3TrainConfig, export_latest, train_eagle3

    def config(compute_dtype: str) -> Eagle3TrainConfig:
        return Eagle3TrainConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr,
                                 warmup_steps=args.warmup_steps, schedule=args.schedule,
                                 draft_vocab_size=args.draft_vocab_size, ttt_steps=args.ttt_steps,
                                 eval_records=args.eval_records, eval_every=args.eval_every,
                                 save_every=args.save_every, log_every=args.log_every, seed=args.seed,
                                 intermediate_size=args.intermediate_size, compute_dtype=compute_dtype)

    _train_drafter(args, config, train_eagle3, export_latest, lambda cfg: "EAGLE-3")


def run_train_dflash(args) -> None:
    from jspec.train.dflash import DFlashTrainConfig, export_latest, train_dflash

    def config(compute_dtype: str) -> DFlashTrainConfig:
        domino = {}
        if args.train_command == "domino":
            domino = dict(domino=not args.head_off, gru_hidden=args.gru_hidden, rank=args.rank,
                          curriculum=not args.no_curriculum, curriculum_fraction=args.curriculum_fraction,
                          curriculum_start=args.curriculum_start, curriculum_end=args.curriculum_end,
                          ttt=args.ttt, init_backbone=args.init_backbone, freeze_backbone=args.freeze_backbone,
                          head_lr_scale=args.head_lr_scale)
        return DFlashTrainConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len, lr=args.lr,
                                 warmup_steps=args.warmup_steps, schedule=args.schedule, block_size=args.block_size,
                                 num_layers=args.num_layers, anchors_per_seq=args.anchors_per_seq,
                                 gamma_decay=args.gamma_decay, position_weights=args.position_weights,
                                 labels=args.labels, intermediate_size=args.intermediate_size,
                                 init_layers=args.init_layers, init_from=args.init_from,
                                 eval_records=args.eval_records, eval_every=args.eval_every,
                                 save_every=args.save_every, log_every=args.log_every, seed=args.seed,
                                 compute_dtype=compute_dtype, **domino)

    def export(model, out: pathlib.Path, dtype: str) -> tuple[int, int]:
        return export_latest(model, out, dtype, command=args.train_command)

    _train_drafter(args, config, train_dflash, export, lambda cfg: "Domino" if cfg.domino else "DFlash")


def _train_drafter(args, config: Callable[[str], Any], train: Callable[..., dict],
                   export: Callable[..., tuple[int, int]], kind: Callable[[Any], str]) -> None:
    """What `train eagle3|dflash|domino` share: --export alone, or build the run's `config` (from the compute dtype),
    train to its end or to --stop-at / --time-limit, and say which."""
    from jspec.models.loading import load_model

    out = pathlib.Path(args.out)
    target_dtype, compute_dtype = map(resolve_dtype, (args.target_dtype, args.compute_dtype))
    if args.export:
        step, size = export(load_model(args.model, dtype=target_dtype), out, args.dtype)
        print(f"jspec: exported step {step} to {out / 'drafter'} ({size / 1e6:.1f} MB of weights)", file=sys.stderr)
        return
    if not args.data:
        raise UserError("--data is required to train (or pass --export)")
    cfg = config(compute_dtype)
    if args.time_limit is not None and not args.time_limit > 0:
        raise UserError(f"--time-limit must be > 0 seconds, got {args.time_limit}")
    model = load_model(args.model, dtype=target_dtype)
    result = train(model, args.data, out, cfg, resume=args.resume, export_dtype=args.dtype, stop_at=args.stop_at,
                   time_limit=args.time_limit, train_only=args.train_only_data, held_out_only=args.held_out_only)
    if result["finished"]:
        print(f"jspec: exported {kind(cfg)} drafter to {out / 'drafter'} ({result['size_bytes'] / 1e6:.1f} MB of "
              "weights)", file=sys.stderr)
    else:
        print(f"jspec: stopped at step {result['step']} of {cfg.steps}; rerun with --resume to continue",
              file=sys.stderr)
