"""Shared by the session plots of Domino's MAT over DFlash's (sessions 28 to 45): the held-out walk runs compared
so far, a run's metrics rows and per-draft training accuracy, each run's walk MAT, a bench's MAT per task and method,
the head-alone training curves, the continued-head figure (sessions 42 on), the steps-fair fork's panels (sessions 52 on), the walk and bench-mean scatters, the
per-draft and ratio axes, the two panels' finish and the figure's save.
Imported by those plot.py scripts (run from the repository root)."""

import json
import pathlib

import matplotlib
import numpy as np

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot  # noqa: E402

from jspec.bench.ratios import paired_ratios  # noqa: E402
from jspec.bench.report import summarize  # noqa: E402

plt = matplotlib.pyplot  # the plot scripts' pyplot, on the file-only backend

RESULTS = pathlib.Path(__file__).parent
S25, S26, S27 = (RESULTS / f"2026-12-03-session{n}-h200" for n in (25, 26, 27))
S28, S29, S30, S31, S32, S33 = (RESULTS / f"2026-12-04-session{n}-h200" for n in (28, 29, 30, 31, 32, 33))
S35 = RESULTS / "2026-12-05-session35-h200"
S39 = RESULTS / "2026-12-05-session39-h100"
GOAL = 1.12  # issue 5: MAT(domino) >= 1.12 x MAT(dflash)
DRAFTS = 10  # drafts shown by the per-draft panels
DRAFT_NUMBERS = np.arange(1, DRAFTS + 1)
BENCH_TASKS = ["humaneval", "gsm8k", "mtbench", "alpaca", "xsum", "mean"]  # the 5-task bench, then its mean

# (label, DFlash run, Domino run) up to session 28: each Domino run against the DFlash drafter it competes with
WALKS_TO_S28 = [("s25 joint, from scratch", S25 / "dflash", S25 / "domino_tf_curriculum"),
                ("s26 joint, from target layers", S26 / "dflash", S26 / "domino_tf_curriculum"),
                ("s27 head alone on s26 DFlash", S26 / "dflash", S27 / "domino_frozen_backbone"),
                ("s28 joint, continued (DFlash 1,200 steps)", S28 / "dflash", S28 / "domino_tf_curriculum"),
                ("s28 head alone on s28 DFlash", S28 / "dflash", S28 / "domino_head_alone")]


def run_rows(run: pathlib.Path, split: str) -> list[dict]:
    """The rows of one split ("train", "eval" or "walk") of a training run's metrics.jsonl, in order."""
    return [r for r in map(json.loads, open(run / "metrics.jsonl")) if r["split"] == split]


def train_mean(run: pathlib.Path, key: str = "acc") -> np.ndarray:
    """Per-draft `key` (the drafter's "acc", or a Domino run's "base_acc", its backbone's) averaged over the run's
    last ten training logs: what it scores on its own training batches."""
    return np.mean([r[key] for r in run_rows(run, "train")[-10:]], axis=0)


def walk_mat(run: pathlib.Path) -> float:
    """The held-out walk MAT a training run logged last (metrics.jsonl, split "walk")."""
    return run_rows(run, "walk")[-1]["walk_mat"]


def bench_mats(bench: pathlib.Path) -> dict[tuple[str, str], float]:
    """(task, method) -> MAT pooled over the task's prompts, as the bench summary computes it."""
    rows = summarize([json.loads(line) for line in open(bench / "results.jsonl")])
    return {(row["dataset"], row["method"]): row["mat"] for row in rows}


def mean_mat(mats: dict[tuple[str, str], float], method: str) -> float:
    """Mean over the bench's tasks of the method's MAT."""
    tasks = sorted({task for task, _ in mats})
    return sum(mats[t, method] for t in tasks) / len(tasks)


def plot_head_curves(ax, runs: list[tuple], title: str, legend_size: int) -> None:
    """One line per training run, (label, run folder) or (label, run folder, steps it continued from): held-out
    teacher-forced accepted length, head over base (its frozen backbone's logits), at each evaluation of the run's
    metrics.jsonl."""
    for i, (label, run, *start) in enumerate(runs):
        offset = start[0] if start else 0
        evals = [r for r in map(json.loads, open(run / "metrics.jsonl")) if r["split"] == "eval"]
        ax.plot([offset + r["step"] for r in evals], [r["accept_len"] / r["base_accept_len"] for r in evals], "o-",
                color=f"C{i}", label=label)
    ax.axhline(1.0, color="black", linewidth=0.5)
    ax.set_xlabel("training step")
    ax.set_ylabel("teacher-forced accepted length, head / base")
    ax.set_title(title)
    ax.legend(fontsize=legend_size)


def plot_walks(ax, walks: list[tuple[str, pathlib.Path, pathlib.Path]]) -> None:
    """One point per (DFlash, Domino) pair: DFlash's walk MAT against Domino's ratio to it (squares: heads trained
    alone on a frozen DFlash backbone)."""
    for i, (label, dflash, domino) in enumerate(walks):
        base = walk_mat(dflash)
        ratio = walk_mat(domino) / base
        ax.scatter(base, ratio, color=f"C{i}", label=f"{label}: {ratio:.3f}", marker="s" if "alone" in label else "o")


def plot_bench_means(ax, benches: list[tuple[str, pathlib.Path]]) -> None:
    """One point per bench: DFlash's mean MAT over the bench's tasks against domino_block's ratio to it (squares:
    heads trained alone)."""
    for i, (label, bench) in enumerate(benches):
        mats = bench_mats(bench)
        base, domino = mean_mat(mats, "dflash"), mean_mat(mats, "domino_block")
        ax.scatter(base, domino / base, color=f"C{i}", label=f"{label}: {domino / base:.3f}",
                   marker="s" if "alone" in label else "o")


def plot_final_accuracy(ax, heads: list[tuple[str, pathlib.Path]], backbones: list[tuple[str, pathlib.Path, str]],
                        legend_size: int) -> None:
    """Held-out teacher-forced accuracy per draft at each run's last evaluation: the heads' (solid, colours C0,
    C1, ...) and, dashed in the colour given, the base logits' of the runs named in `backbones` (their backbones)."""
    for i, (label, run) in enumerate(heads):
        ax.plot(DRAFT_NUMBERS, np.array(run_rows(run, "eval")[-1]["acc"])[:DRAFTS], "-", marker="o", color=f"C{i}",
                label=label)
    for label, run, color in backbones:
        ax.plot(DRAFT_NUMBERS, np.array(run_rows(run, "eval")[-1]["base_acc"])[:DRAFTS], "--", color=color,
                label=label)
    ax.set_ylabel("held-out accuracy (teacher forced)")
    ax.set_title("per draft: heads (solid) over their backbones (dashed)")
    draft_axes((ax,), DRAFT_NUMBERS, legend_size)


def plot_task_ratios(ax, benches: list[tuple[str, pathlib.Path]], title: str, tasks: list[str] = BENCH_TASKS
                     ) -> None:
    """One series per bench: domino_block_stop's MAT over DFlash's in the same run, per task of `tasks` (with
    "mean", the ratio of the means), with 95% paired-bootstrap intervals; the legend gives each bench's mean."""
    width = 0.8 / len(benches)
    for i, (label, results) in enumerate(benches):
        rows = {r["dataset"]: r for r in paired_ratios([json.loads(line) for line in open(results / "results.jsonl")])
                if r["method"] == "domino_block_stop"}
        xs = [t + (i - (len(benches) - 1) / 2) * width for t in range(len(tasks))]
        points = [rows[t]["mat_ratio"] for t in tasks]
        errors = [[p - rows[t]["mat_ci"][0] for t, p in zip(tasks, points)],
                  [rows[t]["mat_ci"][1] - p for t, p in zip(tasks, points)]]
        ax.errorbar(xs, points, yerr=errors, fmt="o", color=f"C{i}", capsize=3,
                    label=f"{label}: {rows['mean']['mat_ratio']:.3f}")
    ax.axhline(GOAL, color="grey", linestyle="--", linewidth=1)
    ax.axhline(1.0, color="black", linewidth=0.5)
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_ylabel("domino_block_stop / dflash, MAT")
    ax.set_title(f"{title} (goal {GOAL})")
    ax.legend(fontsize=8)


def fork_branches(session: pathlib.Path, dflash_label: str) -> list[tuple[str, pathlib.Path, str, str]]:
    """The steps-fair fork's three branches for `plot_fork`: DFlash continued (run dflash_fair), the joint Domino,
    and Domino's own backbone read without its head."""
    domino = session / "domino_tf_curriculum_floor_soft"
    return [(dflash_label, session / "dflash_fair", "accept_len", "o-"),
            ("Domino (joint, λ = 0.5)", domino, "accept_len", "o-"),
            ("Domino's backbone alone", domino, "base_accept_len", "s--")]


def plot_fork(curve, acc, stem: pathlib.Path, branches: list[tuple[str, pathlib.Path, str, str]], fork: int
              ) -> None:
    """The steps-fair fork's two panels (sessions 52 on): held-out teacher-forced accepted length along the chain,
    the stem up to `fork` then each branch (label, run, its accept_len key, line style), and each branch's final
    held-out accuracy per draft."""
    stem_rows = run_rows(stem, "eval")
    curve.plot([r["step"] for r in stem_rows], [r["accept_len"] for r in stem_rows], "o-", color="grey",
               label="DFlash, to the fork")
    for i, (label, run, key, style) in enumerate(branches):
        rows = run_rows(run, "eval")
        curve.plot([fork] + [fork + r["step"] for r in rows], [stem_rows[-1]["accept_len"]] + [r[key] for r in rows],
                   style, color=f"C{i}", label=f"{label}: {rows[-1][key]:.3f}")
        final = rows[-1][key.replace("accept_len", "acc")]
        acc.plot(DRAFT_NUMBERS, np.array(final)[:DRAFTS], style, color=f"C{i}", label=label)
    curve.axvline(fork, color="black", linewidth=0.5)
    curve.set_xlabel("training step of the chain")
    curve.set_ylabel("held-out teacher-forced accepted length")
    acc.set_ylabel("held-out accuracy (teacher forced)")
    acc.set_title("per draft, end of each branch")
    draft_axes((acc,), DRAFT_NUMBERS, legend_size=8)


def fork_figure(session: pathlib.Path, dflash_label: str, benches: list[tuple[str, pathlib.Path]],
                path: pathlib.Path, suptitle: str, reference: tuple[str, pathlib.Path] | None = None,
                fork: int = 600) -> None:
    """The steps-fair fork's figure (sessions 52 on): `plot_fork`'s two panels for `session` (its stem forked at
    `fork` steps, then 400 steps a branch), with an earlier session's branch (`reference`: label, run) dotted in
    grey, and the benches' per-task ratios; saved to `path`."""
    fig, (curve, acc, bench) = plt.subplots(1, 3, figsize=(17, 5.2))
    plot_fork(curve, acc, session / "dflash", fork_branches(session, dflash_label), fork)
    if reference:
        label, run = reference
        rows = run_rows(run, "eval")
        curve.plot([fork + r["step"] for r in rows], [r["accept_len"] for r in rows], "x:", color="grey",
                   label=f"{label}: {rows[-1]['accept_len']:.3f}")
    curve.set_title(f"{fork} steps of DFlash, then 400 more for each branch")
    curve.legend(fontsize=8)
    plot_task_ratios(bench, benches, "T = 0 bench, 20 prompts a task")
    save_figure(fig, path, suptitle)


def head_sessions_figure(heads: list[tuple], backbone: str, benches: list[tuple[str, pathlib.Path]],
                         bench_title: str, path: pathlib.Path, suptitle: str,
                         other_backbones: list[tuple[str, pathlib.Path]] = ()) -> None:
    """The continued-head figure of sessions 42 on: training curves (`heads`, as for `plot_head_curves`), final
    per-draft accuracy of each head with the first head's backbone dashed (labelled `backbone`; `other_backbones`:
    (label, head run) for the backbones of heads on another DFlash drafter, dashed in black), and the benches'
    per-task ratios; saved to `path`."""
    fig, (curve, acc, bench) = plt.subplots(1, 3, figsize=(17, 5.2))
    plot_head_curves(curve, heads, "held-out gain over the backbone in training", legend_size=9)
    backbones = [(backbone, heads[0][1], "grey")] + [(label, run, "black") for label, run in other_backbones]
    plot_final_accuracy(acc, [head[:2] for head in heads], backbones, legend_size=9)
    plot_task_ratios(bench, benches, bench_title)
    save_figure(fig, path, suptitle)


def finish_ratio_figure(fig, left, right, right_what: str, right_title: str, suptitle: str, path: pathlib.Path,
                        **legend) -> None:
    """The walk panel (left) and the bench panel (right): ratio axes, legends (`legend`: ax.legend's placement),
    titles; then the figure is saved to `path`."""
    for ax, what in ((left, "held-out walk MAT"), (right, right_what)):
        ratio_axes(ax, what)
        ax.legend(fontsize=7, **legend)
    left.set_title("held out: 64 records, decode loop replayed")
    right.set_title(right_title)
    save_figure(fig, path, suptitle)


def save_figure(fig, path: pathlib.Path, suptitle: str | None = None) -> None:
    """The figure's title (when given) and layout, then the PNG at `path` (120 dpi, as every session plot)."""
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def draft_axes(axes, drafts: np.ndarray, legend_size: int) -> None:
    """The x axis of per-draft panels (one tick per draft) and their legends."""
    for ax in axes:
        ax.set_xlabel("draft")
        ax.set_xticks(drafts)
        ax.legend(fontsize=legend_size)


def ratio_axes(ax, what: str) -> None:
    """The goal and parity lines, the axis labels and the shared y range of a Domino / DFlash ratio panel."""
    ax.axhline(GOAL, color="grey", linestyle="--", linewidth=1)
    ax.axhline(1.0, color="black", linewidth=0.5)
    ax.set_xlabel(f"DFlash {what}")
    ax.set_ylabel(f"Domino / DFlash, {what}")
    ax.set_ylim(0.98, 1.15)
