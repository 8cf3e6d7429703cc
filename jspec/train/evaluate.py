"""Scores exported DFlash / Domino drafters on distilled answers (`jspec train evaluate`).

Two figures per drafter, as the block trainers report them at the end of a run:
- the held-out statistics: per-draft accuracy and the mean accept length over anchors drawn at random (the same
  anchors as the trainer's evaluation, for the same seed, batch and row shape);
- the walk: greedy speculative decoding replayed over the answers (`jspec.train.walk`), MAT weighted as the bench
  weights it.

Scoring several drafters on the same folder, e.g. answers to prompts of one benchmark's distribution, compares
them away from their training data and without running the decode loop.
"""

import dataclasses
import pathlib

from flax import nnx

from jspec.drafters.dflash import DFlashDrafter
from jspec.drafters.domino import DominoDrafter
from jspec.errors import UserError
from jspec.io.dflash_checkpoint import load_dflash_checkpoint
from jspec.models.loading import LoadedModel
from jspec.models.precision import COMPUTE_DTYPES
from jspec.train import common, dflash
from jspec.train.packing import Record, pack, pad_rows

# Only the reported loss depends on the position weights; the trainer's default keeps it comparable.
_GAMMA = 7.0


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    seq_len: int = 1024
    batch_size: int = 8
    anchors_per_seq: int = 128  # blocks a row, as in training: sampled for the accept length, a group for the walk
    held_out: int | None = None  # score the trainer's held-out split of this many records (under `seed`) ...
    limit: int | None = None  # ... else the first `limit` records (default: all)
    seed: int = 0
    compute_dtype: str = "float32"

    def __post_init__(self):
        for name in ("seq_len", "batch_size", "anchors_per_seq"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.anchors_per_seq > self.seq_len - 1:
            raise UserError(f"--anchors-per-seq {self.anchors_per_seq} exceeds the {self.seq_len - 1} anchor "
                            "positions of a row")
        if self.held_out is not None and self.limit is not None:
            raise UserError("--held-out and --limit choose the records in two ways: pass one")
        for name in ("held_out", "limit"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise UserError(f"--compute-dtype must be one of {', '.join(COMPUTE_DTYPES)}, got "
                            f"{self.compute_dtype!r}")


def select_records(model: LoadedModel, data_dir: common.DataDirs, cfg: EvalConfig) -> list[Record]:
    """The records to score: the trainer's held-out split, the first `limit`, or all of them."""
    records = dflash.load_records(data_dir, model.cfg.vocab_size, cfg.seq_len)
    if cfg.held_out is not None:
        return common.split_records(records, cfg.held_out, cfg.seed)[1]
    return records[: cfg.limit]


def load_drafter(model: LoadedModel, drafter_dir: pathlib.Path, cfg: EvalConfig) -> DFlashDrafter | DominoDrafter:
    """The float32 drafter in `drafter_dir`, checked against the target and the row length."""
    drafter = load_dflash_checkpoint(drafter_dir, model.cfg, "float32")
    block_size = (drafter.backbone if isinstance(drafter, DominoDrafter) else drafter).cfg.block_size
    if cfg.seq_len < block_size + 1:
        raise UserError(f"--seq-len {cfg.seq_len} is shorter than a block of {drafter_dir} and its anchor: use at "
                        f"least {block_size + 1}")
    return drafter


def score_drafter(model: LoadedModel, drafter: DFlashDrafter | DominoDrafter, records: list[Record],
                  cfg: EvalConfig) -> dict:
    """{kind, block_size, acc, accept_len, walk_mat, anchor_accept_len} of `drafter` on `records`, with `base_*`
    for a Domino drafter (its backbone's logits, the head off)."""
    head = isinstance(drafter, DominoDrafter)
    backbone = drafter.backbone if head else drafter
    graphdef, state = nnx.split(drafter)
    params = nnx.to_pure_dict(state)
    statics = dict(graphdef=graphdef, target_graphdef=model.graphdef,
                   objective=dflash.Objective(taps=backbone.cfg.tap_layers, anchors=cfg.anchors_per_seq, gamma=_GAMMA,
                                              ttt=False, seed=cfg.seed, compute_dtype=cfg.compute_dtype))
    rows = pad_rows(pack(records, cfg.seq_len), cfg.batch_size)
    stats = dflash.evaluate(rows, cfg.batch_size, params, model.params, head, **statics)
    # The decode loop drafts B − 1 tokens a block, Domino's shifted backbone included.
    walk = dflash.walk_evaluate(rows, cfg.batch_size, params, model.params, head, backbone.cfg.block_size - 1,
                                **statics)
    stats = {k: v for k, v in stats.items() if not k.endswith("loss")}
    return {"kind": "domino" if head else "dflash", "block_size": backbone.cfg.block_size, **stats, **walk}


def evaluate_drafters(model: LoadedModel, data_dir: common.DataDirs, drafter_dirs: list[pathlib.Path],
                      cfg: EvalConfig) -> dict:
    """Every drafter scored on the same records: {data, records, answer_tokens, config, drafters: [{drafter, ...}]}."""
    if not drafter_dirs:
        raise UserError("pass at least one --drafter")
    drafters = [load_drafter(model, path, cfg) for path in drafter_dirs]  # bad checkpoints fail before any work
    records = select_records(model, data_dir, cfg)
    scores = [{"drafter": str(path), **score_drafter(model, drafter, records, cfg)}
              for path, drafter in zip(drafter_dirs, drafters)]
    return {"data": common.data_setting(data_dir), "records": len(records),
            "answer_tokens": int(sum(m.sum() for _, m in records)),
            "config": dataclasses.asdict(cfg), "drafters": scores}


def format_table(result: dict) -> str:
    """A markdown table of the scores, with each drafter's walk MAT relative to the first drafter's."""
    first = result["drafters"][0]["walk_mat"]
    lines = [f"{result['records']} records, {result['answer_tokens']} answer tokens of {result['data']}", "",
             "| drafter | kind | accept length | walk MAT | walk MAT / first | head off: accept length, walk MAT | "
             "P(draft k correct), k = 1..4 |", "|---|---|---|---|---|---|---|"]
    for s in result["drafters"]:
        base = f"{s['base_accept_len']:.3f}, {s['base_walk_mat']:.3f}" if "base_walk_mat" in s else "–"
        lines.append(f"| {s['drafter']} | {s['kind']} | {s['accept_len']:.3f} | {s['walk_mat']:.3f} | "
                     f"{s['walk_mat'] / first:.3f} | {base} | {' '.join(f'{a:.3f}' for a in s['acc'][:4])} |")
    return "\n".join(lines)
