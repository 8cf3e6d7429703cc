"""Settings of `jspec train dflash` and `jspec train domino`, and what follows from them: the drafter's architecture
and the base-anchored curriculum of the Domino loss."""

import dataclasses

import numpy as np
from jaxtyping import Float

from jspec.config import ModelConfig
from jspec.drafters.dflash import DFlashConfig
from jspec.drafters.domino import DominoConfig
from jspec.errors import UserError
from jspec.io.dflash_checkpoint import read_dflash_config
from jspec.models.precision import COMPUTE_DTYPES
from jspec.train import common

INIT_LAYERS = ("random", "target")
POSITION_WEIGHTS = ("decay", "reach")
LABELS = ("data", "target")


@dataclasses.dataclass(frozen=True)
class DFlashTrainConfig:
    steps: int = 2000
    batch_size: int = 8
    seq_len: int = 1024
    lr: float = 6e-4  # DFlash paper and SpecForge
    warmup_steps: int = 100
    schedule: str = "cosine"  # or "linear": the decay after warm-up, to 0 at `steps`
    block_size: int = 16
    num_layers: int = 5  # draft layers (Qwen3-8B recipe); also the number of target taps
    anchors_per_seq: int = 128  # blocks per packed row
    gamma_decay: float = 7.0  # γ of the position weights: 7 for blocks of 16 (paper: 5 for 10, 4 for 8)
    # "decay": exp(−(j − 1)/γ), the paper's; "reach": each draft weighted by the probability that the drafter's own
    # earlier drafts are right (`reach_weights`), ours
    position_weights: str = "decay"
    # What each draft is scored against: "data", the data token (hard labels: DFlash paper and SpecForge); "target",
    # the target's whole next-token distribution at that position (soft labels, ours). On greedy answers both have the
    # same argmax; on answers sampled at T = 1 the target's distribution carries none of the sampling noise.
    labels: str = "data"
    intermediate_size: int | None = None  # drafter MLP width; None: the target's
    eval_records: int = 64
    eval_every: int = 200
    save_every: int = 500
    log_every: int = 10
    seed: int = 0
    domino: bool = False  # add and train the Domino head (`jspec train domino`)
    gru_hidden: int = 1024  # Domino `gru_hidden_dim`
    rank: int = 256  # Domino `emb_dim`
    curriculum: bool = True  # base-anchored curriculum (Domino)
    # λ reaches 0 after this fraction of the steps. 1.0 as in SpecForge's Domino example config and the Domino
    # author's training script (the code default there is 0.5); at 0.5 our 1-epoch runs let the backbone drift once
    # the base loss was gone (held-out base loss 6.59 -> 7.09 over the second half).
    curriculum_fraction: float = 1.0
    # λ at step 0 (SpecForge's `lambda_base_start`). 1 for a fresh head; lower when --init-from continues a trained
    # Domino drafter, whose trained head would otherwise learn little while λ is still near 1.
    curriculum_start: float = 1.0
    # λ's floor, reached at the end of the decay (0 in SpecForge). Above 0, the base loss keeps anchoring a jointly
    # trained backbone: session 35's joint backbone, with λ at 0 for the last steps, ended 5% behind DFlash alone.
    curriculum_end: float = 0.0
    ttt: bool = False  # Domino's GRU reads its own greedy drafts instead of the ground truth
    # Train the Domino head alone on a trained backbone (--init-backbone / --init-from), which then stays exactly the
    # drafter it started as: Domino = that DFlash drafter + a head, its uncorrected first draft the same.
    freeze_backbone: bool = False
    # The head's learning rate as a multiple of `lr` (its AdamW updates scaled; the backbone keeps `lr`): a fresh
    # head on a trained backbone is what a fork starts with, and its lift was still rising when the schedule ended.
    head_lr_scale: float = 1.0
    init_backbone: str | None = None  # a DFlash/Domino checkpoint directory whose backbone starts the run
    # An exported drafter of the same kind and shape whose every weight starts the run: training continued across
    # machines that keep no checkpoint (AdamW's moments and the schedule start afresh).
    init_from: str | None = None
    init_layers: str = "random"  # "target": the draft layers start as copies of the target's last layers
    compute_dtype: str = "bfloat16"  # the drafter's matmuls and activations (weights and AdamW stay float32)

    def __post_init__(self):
        for name in ("batch_size", "seq_len", "num_layers", "anchors_per_seq", "gru_hidden", "rank"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.block_size < 2:
            raise UserError(f"--block-size must be >= 2, got {self.block_size}")
        if self.seq_len < self.block_size + 1:
            raise UserError(f"--seq-len {self.seq_len} is shorter than a block and its anchor: use at least "
                            f"{self.block_size + 1}")
        if self.anchors_per_seq > self.seq_len - 1:
            raise UserError(f"--anchors-per-seq {self.anchors_per_seq} exceeds the {self.seq_len - 1} anchor "
                            "positions of a row")
        common.check_loop_config(self)
        if self.compute_dtype not in COMPUTE_DTYPES:
            raise UserError(f"--compute-dtype must be one of {', '.join(COMPUTE_DTYPES)}, got {self.compute_dtype!r}")
        if not self.gamma_decay > 0:
            raise UserError(f"--gamma-decay must be > 0, got {self.gamma_decay}")
        if self.position_weights not in POSITION_WEIGHTS:
            raise UserError(f"--position-weights must be one of {', '.join(POSITION_WEIGHTS)}, got "
                            f"{self.position_weights!r}")
        if self.labels not in LABELS:
            raise UserError(f"--labels must be one of {', '.join(LABELS)}, got {self.labels!r}")
        if self.labels == "target" and self.position_weights == "reach":
            raise UserError("--position-weights reach weighs drafts by the data tokens' probabilities: use it with "
                            "--labels data")
        if not 0 < self.curriculum_fraction <= 1:
            raise UserError(f"--curriculum-fraction must be in (0, 1], got {self.curriculum_fraction}")
        if not 0 <= self.curriculum_start <= 1:
            raise UserError(f"--curriculum-start must be in [0, 1], got {self.curriculum_start}")
        if not 0 <= self.curriculum_end <= self.curriculum_start:
            raise UserError(f"--curriculum-end must be in [0, --curriculum-start = {self.curriculum_start}], got "
                            f"{self.curriculum_end}")
        if self.eval_records < 0:
            raise UserError(f"--eval-records must be >= 0, got {self.eval_records}")
        if self.intermediate_size is not None and self.intermediate_size < 1:
            raise UserError(f"--intermediate-size must be >= 1, got {self.intermediate_size}")
        if not self.domino and (self.ttt or self.init_backbone or self.freeze_backbone):
            raise UserError("--ttt, --init-backbone and --freeze-backbone apply to `jspec train domino` with its head")
        if not self.head_lr_scale > 0:
            raise UserError(f"--head-lr-scale must be > 0, got {self.head_lr_scale}")
        if not self.domino and self.head_lr_scale != 1.0:
            raise UserError("--head-lr-scale applies to `jspec train domino` with its head")
        if self.freeze_backbone and not (self.init_backbone or self.init_from):
            raise UserError("--freeze-backbone keeps the backbone as it starts: give it a trained one with "
                            "--init-backbone (or --init-from)")
        if self.init_layers not in INIT_LAYERS:
            raise UserError(f"--init-layers must be one of {', '.join(INIT_LAYERS)}, got {self.init_layers!r}")
        starts = [flag for flag, on in (("--init-layers", self.init_layers != "random"),
                                         ("--init-backbone", self.init_backbone), ("--init-from", self.init_from))
                  if on]
        if len(starts) > 1:
            raise UserError(f"{' and '.join(starts)} both set the drafter's start: pass one")

    @property
    def command(self) -> str:
        return "domino" if self.domino else "dflash"


def drafter_config(target_cfg: ModelConfig, cfg: DFlashTrainConfig) -> DFlashConfig | DominoConfig:
    """The official architecture for the target: its layer shape, DFlash's tap rule, the last id as mask token;
    Domino adds its head on a `shift_label` backbone with one uncorrected leading draft. A backbone started from
    `cfg.init_backbone` (or `cfg.init_from`) keeps that checkpoint's labelling: a DFlash export's row k predicts
    start + k, and a frozen (or briefly trained) one would draft garbage if asked for start + k + 1."""
    shift_label = cfg.domino
    start = cfg.init_backbone or cfg.init_from  # a continued frozen-backbone head keeps its DFlash labelling too
    if cfg.domino and start:
        source = read_dflash_config(start, target_cfg)
        shift_label = (source.backbone if isinstance(source, DominoConfig) else source).shift_label
    backbone = DFlashConfig.for_target(target_cfg, cfg.num_layers, block_size=cfg.block_size,
                                       intermediate_size=cfg.intermediate_size, shift_label=shift_label)
    if not cfg.domino:
        return backbone
    return DominoConfig(backbone, gru_hidden=cfg.gru_hidden, rank=cfg.rank, prefix_len=1)


def curriculum(cfg: DFlashTrainConfig) -> Float[np.ndarray, " S"]:
    """λ of every optimizer step: the base-logit share of the Domino loss, linear from curriculum_start to
    curriculum_end over curriculum_fraction of the steps, then flat. 0 throughout with a frozen backbone,
    where the base loss trains nothing and λ would only scale the head's loss down."""
    if not (cfg.domino and cfg.curriculum) or cfg.freeze_backbone:
        return np.zeros(cfg.steps, np.float32)
    step = np.arange(cfg.steps, dtype=np.float64)
    remaining = np.clip(1.0 - step / (cfg.curriculum_fraction * cfg.steps), 0.0, 1.0)
    return (cfg.curriculum_end + (cfg.curriculum_start - cfg.curriculum_end) * remaining).astype(np.float32)
