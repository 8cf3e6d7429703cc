"""Self-distillation data: the target regenerates answers to ShareGPT prompts, stored as token ids + loss masks.

Drafters are trained on the target's own outputs (EAGLE-3, DFlash, Domino recipes), so the data is the target's
continuation of each prompt's first user turn under its chat template; with `turns="followups"`, of each later user
turn instead, after the conversation before it (ShareGPT's conversations hold about 3.6 user turns each: with
prompts of up to 768 tokens this about doubles the ShareGPT prompts there are). The prompts can also come from a
benchmark, with the instruction `jspec bench` gives it, past its first `skip` records: answers from a task's
distribution that the bench does not use, to score drafters on (`jspec train evaluate`). Output folder layout:

    manifest.json        settings (model, seed, sampling, lengths) and the number of shards written
    shard-00000.npz      tokens (int32, concatenated prompt + answer per record), offsets [n + 1],
                         prompt_lens [n] (loss only on positions >= prompt_len), ids [n]

Shards are written atomically and in order, so an interrupted run resumes after the last complete shard and
produces the same files as an uninterrupted one (prompts in file order, per-shard seeds).
"""

import dataclasses
import itertools
import json
import os
import pathlib
from collections.abc import Iterator, Sequence

import numpy as np
from tqdm import tqdm

from jspec.bench.datasets import DATASETS, MULTI_TURN, load_followup_turns, load_prompts
from jspec.decode import generate
from jspec.errors import UserError
from jspec.models.loading import LoadedModel
from jspec.sampling import Sampling

FORMAT = "jspec-distill-v1"


@dataclasses.dataclass(frozen=True)
class DistillConfig:
    num_prompts: int | None  # None: every prompt of the dataset (past `skip`) that fits
    max_prompt_tokens: int = 512
    max_new_tokens: int = 256
    batch_size: int = 8
    shard_size: int = 64  # prompts per shard: the unit of resumption
    seed: int = 0
    temperature: float = 0.0
    top_p: float = 1.0
    dataset: str = "sharegpt"  # where the prompts come from (jspec.bench.datasets)
    skip: int = 0  # records of `dataset` passed over first, in file order
    turns: str = "first"  # "first": each record's first user turn; "followups": every later one, with its history

    def __post_init__(self):
        if self.dataset not in DATASETS:
            raise UserError(f"unknown dataset {self.dataset!r}; expected one of {', '.join(DATASETS)}")
        if self.turns not in ("first", "followups"):
            raise UserError(f"--turns must be first or followups, got {self.turns!r}")
        if self.turns == "followups" and self.dataset not in MULTI_TURN:
            raise UserError(f"--turns followups needs a multi-turn dataset ({', '.join(MULTI_TURN)}), "
                            f"not {self.dataset!r}")
        if self.skip < 0:
            raise UserError(f"--skip must be >= 0, got {self.skip}")
        if self.shard_size % self.batch_size:
            raise UserError(f"shard size {self.shard_size} must be a multiple of the batch size {self.batch_size}")


def records_past(folders: Sequence[pathlib.Path], dataset: str) -> int:
    """The `skip` that starts past every record of `dataset` (file order) that any of `folders` answered a turn of,
    first or later: prompts drawn after it share no conversation with the data in those folders, so a drafter
    trained there has never seen their answers."""
    index = {p["id"]: i for i, p in enumerate(load_prompts(dataset))}
    last = -1
    for folder in folders:
        config = _read_manifest(folder)["config"]
        made_from = config.get("dataset", "sharegpt")  # folders older than these settings hold first turns of it
        if made_from != dataset:
            raise UserError(f"--after {folder} holds answers to {made_from} prompts, not {dataset}")
        followups = config.get("turns", "first") == "followups"
        for rid, _, _ in read_dataset(folder):
            record = rid.rsplit("/turn", 1)[0] if followups else rid
            if record not in index:
                raise UserError(f"--after {folder}: record {rid!r} is not in the installed {dataset} file (made "
                                "from another version of it?)")
            last = max(last, index[record])
    return last + 1


def _manifest(model: LoadedModel, cfg: DistillConfig) -> dict:
    return {"format": FORMAT, "model": model.name, "dtype": model.dtype, "vocab_size": model.cfg.vocab_size,
            "config": dataclasses.asdict(cfg)}


def _fitting_prompts(model: LoadedModel, cfg: DistillConfig) -> Iterator[tuple[str, list[int]]]:
    """(id, prompt ids) of the dataset's records after the first `skip` (file order) that fit `max_prompt_tokens`
    under the chat template: their first user turns, or their later ones with the conversation before each."""
    if cfg.turns == "followups":
        chats = ((r["id"], r["messages"]) for r in load_followup_turns(cfg.dataset, cfg.skip))
    else:
        chats = ((r["id"], [{"role": "user", "content": r["prompt"]}])
                 for r in load_prompts(cfg.dataset, None)[cfg.skip :])
    for rid, messages in chats:
        ids = model.tokenizer.encode_chat(messages)
        if len(ids) <= cfg.max_prompt_tokens:
            yield rid, ids


def count_prompts(model: LoadedModel, cfg: DistillConfig) -> int:
    """How many prompts `cfg` can draw from its dataset (`num_prompts` aside)."""
    return sum(1 for _ in _fitting_prompts(model, cfg))


def _select_prompts(model: LoadedModel, cfg: DistillConfig) -> list[tuple[str, list[int]]]:
    out = list(itertools.islice(_fitting_prompts(model, cfg), cfg.num_prompts))
    if len(out) < (cfg.num_prompts or 1):
        skipped = f" after the first {cfg.skip} records" if cfg.skip else ""
        kind = " follow-up" if cfg.turns == "followups" else ""
        raise UserError(f"only {len(out)} {cfg.dataset}{kind} prompts{skipped} fit {cfg.max_prompt_tokens} tokens; "
                        f"asked for {cfg.num_prompts or 'all'}")
    return out


def distill(model: LoadedModel, out_dir: pathlib.Path, cfg: DistillConfig, progress: bool = True) -> int:
    """Generates (or resumes) the dataset; returns the number of records on disk."""
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest_path = out_dir / "manifest.json"
    manifest = _manifest(model, cfg)
    if manifest_path.exists():
        old = json.loads(manifest_path.read_text())
        if {k: v for k, v in old.items() if k != "shards"} != manifest:
            raise UserError(f"{out_dir} holds data made with other settings; use a new --out folder")
    prompts = _select_prompts(model, cfg)
    shards = [prompts[i : i + cfg.shard_size] for i in range(0, len(prompts), cfg.shard_size)]
    done = sum(1 for i in range(len(shards)) if (out_dir / f"shard-{i:05d}.npz").exists())
    sampling = Sampling(temperature=cfg.temperature, top_p=cfg.top_p)
    width = -(-cfg.max_prompt_tokens // 64) * 64  # one prompt width for every batch: one compilation
    batch_rows = min(cfg.batch_size, len(prompts))  # never more rows than there are prompts
    bar = tqdm(total=len(prompts), initial=sum(map(len, shards[:done])), desc="distill", unit="prompt",
               disable=not progress)
    for index in range(done, len(shards)):
        records = []
        for b in range(0, len(shards[index]), cfg.batch_size):
            batch = shards[index][b : b + cfg.batch_size]
            # A short last batch is padded with copies of its last prompt: a batch of another size would compile
            # the decode loop again (once per dataset with `--dataset a,b,...`), which costs more than the rows.
            rows = [ids for _, ids in batch]
            rows += [rows[-1]] * (batch_rows - len(rows))
            res = generate(model.graphdef, model.params, rows, max_new_tokens=cfg.max_new_tokens,
                           sampling=sampling, eos_ids=model.eos_token_ids, seed=cfg.seed + index * cfg.shard_size + b,
                           max_cache_len=width + cfg.max_new_tokens, pad_to=width)
            records += [(rid, ids, new) for (rid, ids), new in zip(batch, res.tokens)]
            bar.update(len(batch))
        _write_shard(out_dir / f"shard-{index:05d}.npz", records)
        manifest_path.write_text(json.dumps({**manifest, "shards": index + 1}, indent=2))
    bar.close()
    manifest_path.write_text(json.dumps({**manifest, "shards": len(shards)}, indent=2))
    return len(prompts)


def _write_shard(path: pathlib.Path, records: list[tuple[str, list[int], list[int]]]) -> None:
    seqs = [ids + new for _, ids, new in records]
    offsets = np.cumsum([0] + [len(s) for s in seqs]).astype(np.int64)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, tokens=np.concatenate([np.asarray(s, np.int32) for s in seqs]), offsets=offsets,
                 prompt_lens=np.array([len(ids) for _, ids, _ in records], np.int32),
                 ids=np.array([rid for rid, _, _ in records]))
    os.replace(tmp, path)


def read_dataset(out_dir: pathlib.Path):
    """Yields (id, tokens [L] int32, loss_mask [L] bool) for every record, in order."""
    manifest = _read_manifest(out_dir)
    for index in range(manifest.get("shards", 0)):
        path = out_dir / f"shard-{index:05d}.npz"
        try:
            with np.load(path, allow_pickle=False) as f:
                tokens, offsets, prompt_lens, ids = f["tokens"], f["offsets"], f["prompt_lens"], f["ids"]
        except (OSError, ValueError, KeyError) as e:
            raise UserError(f"{path} is missing or corrupt ({e}); delete it and rerun to regenerate it") from None
        for j in range(len(prompt_lens)):
            seq = tokens[offsets[j] : offsets[j + 1]]
            yield str(ids[j]), seq, np.arange(len(seq)) >= prompt_lens[j]


def _read_manifest(out_dir: pathlib.Path) -> dict:
    manifest_path = out_dir / "manifest.json"
    if not manifest_path.exists():
        raise UserError(f"{out_dir} is not a distillation folder (no manifest.json)")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("format") != FORMAT:
        raise UserError(f"{out_dir}: unknown data format {manifest.get('format')!r}")
    return manifest
