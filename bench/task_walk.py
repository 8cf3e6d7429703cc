"""Per-task walk of block drafters: the decode loop's MAT on each bench task, without the bench.

For each task, the target answers that task's prompts past the first `--skip` (the bench reads the first
`--limit`, 20 by default, so the two sets are disjoint), with the bench's instruction and prompt-length cap. Then
every `--drafter` is scored on those answers (`jspec.train.evaluate`): the walk MAT (greedy speculative decoding
replayed over the answers, weighted as the bench weights MAT), the mean accept length over every anchor, and for
Domino the same with the head off. One process: the target loads once, and each compile is shared by the tasks.

    python bench/task_walk.py --model qwen2.5-coder-1.5b --drafter RUN/dflash/drafter \
        --drafter RUN/domino/drafter --out OUT

writes OUT/data/<task>/ (distilled answers, resumable), OUT/task_walk.json, OUT/summary.md (a row per task, ratios
against the first drafter) and OUT/task_walk.png.
"""

import argparse
import dataclasses
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TASKS = "humaneval,gsm8k,mtbench,alpaca,xsum"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--drafter", action="append", required=True, help="exported DFlash/Domino drafter (repeat)")
    p.add_argument("--tasks", default=TASKS)
    p.add_argument("--skip", type=int, default=20, help="records the bench reads (its --limit)")
    p.add_argument("--prompts", type=int, default=120, help="answers per task at most (rounded down to a multiple "
                   "of --batch-size, so every batch compiles once)")
    p.add_argument("--batch-size", type=int, default=20, help="prompts answered at once")
    p.add_argument("--max-prompt-tokens", type=int, default=1024, help="the bench's default cap")
    p.add_argument("--max-new-tokens", type=int, default=256, help="the bench's default")
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--anchors-per-seq", type=int, default=128)
    p.add_argument("--eval-batch-size", type=int, default=8, help="packed rows scored at once")
    p.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                   help="the target's and the drafters' compute (auto: float32 on CPU, else bfloat16)")
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


def summary_rows(scores: dict[str, dict]) -> list[dict]:
    """A row per task: each drafter's walk MAT and anchor accept length, and the last drafter against the first."""
    rows = []
    for task, result in scores.items():
        first, last = result["drafters"][0], result["drafters"][-1]
        rows.append({"task": task, "records": result["records"],
                     "walk": [d["walk_mat"] for d in result["drafters"]],
                     "anchor": [d["anchor_accept_len"] for d in result["drafters"]],
                     "walk_ratio": last["walk_mat"] / first["walk_mat"],
                     "anchor_ratio": last["anchor_accept_len"] / first["anchor_accept_len"],
                     "base_walk": last.get("base_walk_mat")})
    return rows


def markdown(rows: list[dict], drafters: list[str], header: str) -> str:
    names = [pathlib.Path(d).parent.name or d for d in drafters]
    lines = [header, "", "| task | answers | " + " | ".join(f"walk MAT {n}" for n in names) + " | walk ratio | "
             + " | ".join(f"anchor {n}" for n in names) + " | anchor ratio | last, head off: walk MAT |",
             "|---|---|" + "---|" * (2 * len(names) + 3)]
    for r in rows:
        base = "–" if r["base_walk"] is None else f"{r['base_walk']:.3f}"
        lines.append(f"| {r['task']} | {r['records']} | " + " | ".join(f"{w:.3f}" for w in r["walk"])
                     + f" | {r['walk_ratio']:.3f} | " + " | ".join(f"{a:.3f}" for a in r["anchor"])
                     + f" | {r['anchor_ratio']:.3f} | {base} |")
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in ("walk_ratio", "anchor_ratio")}
    lines.append("| **mean** | | " + " | ".join("" for _ in names) + f" | **{mean['walk_ratio']:.3f}** | "
                 + " | ".join("" for _ in names) + f" | **{mean['anchor_ratio']:.3f}** | |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], drafters: list[str], path: pathlib.Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = [pathlib.Path(d).parent.name or d for d in drafters]
    x = np.arange(len(rows))
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(1.6 * len(rows) + 2, 3.6))
    for i, name in enumerate(names):
        ax.bar(x + (i - (len(names) - 1) / 2) * width, [r["walk"][i] for r in rows], width, label=name)
    for xi, r in zip(x, rows):
        ax.annotate(f"×{r['walk_ratio']:.2f}", (xi, max(r["walk"])), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [r["task"] for r in rows])
    ax.set_ylabel("walk MAT (held-out answers)")
    ax.set_ylim(0.9, max(max(r["walk"]) for r in rows) * 1.1)  # a MAT of 1 still shows a bar
    ax.legend(fontsize=8)
    ax.set_title("decode-loop MAT replayed over each task's answers", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import jax

    from jspec.errors import UserError
    from jspec.models.loading import load_model
    from jspec.train.distill import DistillConfig, count_prompts, distill
    from jspec.train.evaluate import EvalConfig, evaluate_drafters

    dtype = args.dtype if args.dtype != "auto" else ("float32" if jax.default_backend() == "cpu" else "bfloat16")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        model = load_model(args.model, dtype=dtype)
        cfg = EvalConfig(seq_len=args.seq_len, batch_size=args.eval_batch_size, anchors_per_seq=args.anchors_per_seq,
                         compute_dtype=dtype)
        scores = {}
        for task in args.tasks.split(","):
            base = DistillConfig(num_prompts=1, max_prompt_tokens=args.max_prompt_tokens,
                                 max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                                 shard_size=args.batch_size, dataset=task, skip=args.skip)
            n = min(args.prompts, count_prompts(model, base)) // args.batch_size * args.batch_size
            if n == 0:
                raise UserError(f"{task}: fewer than --batch-size {args.batch_size} prompts past the first {args.skip}")
            distill(model, out / "data" / task, dataclasses.replace(base, num_prompts=n))
            scores[task] = evaluate_drafters(model, out / "data" / task, [pathlib.Path(d) for d in args.drafter], cfg)
            walks = ", ".join(f"{d['walk_mat']:.3f}" for d in scores[task]["drafters"])
            print(f"{task}: {n} answers, walk MAT {walks}", file=sys.stderr, flush=True)
    except UserError as e:
        print(f"task_walk: error: {e}", file=sys.stderr)
        return 2
    rows = summary_rows(scores)
    (out / "task_walk.json").write_text(json.dumps({"args": vars(args), "scores": scores, "rows": rows}, indent=2))
    header = (f"Walk MAT by task ({args.model}, {dtype}; answers to prompts past the first {args.skip} of each "
              f"task, at most {args.max_new_tokens} new tokens)")
    (out / "summary.md").write_text(markdown(rows, args.drafter, header))
    plot(rows, args.drafter, out / "task_walk.png")
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
