"""`graft` and `eagle3_pruned`: the EAGLE-3 dynamic tree pruned at calibrated confidence checkpoints, and (graft)
candidates retrieved from the adjacency matrix grafted into the slots pruning frees (docs/algorithms.md §2).

Stages. Checkpoint d judges tree level d + 1 (jspec.drafters.dynamic_tree: "depth 0" = the root's children after
the first drafter forward, "depth 1" = level 2, "depth 5" = level 6); a row whose confidence c_d is below τ_d stops
drafting there and enters stage d. At budget 60 the stages keep 8 / 24 / 40 draft nodes (the top by cumulative
score among the nodes expanded so far) and retrieve a 52 / 36 / 20-slot template (root shared, so draft + template
= budget); an unpruned row keeps the full 59-node tree and retrieves nothing. Other budgets scale the split
(`jspec.retrieval.templates.graft_stages`). Every row of a batch keeps its own stage. The default draft depth is 7
so that the depth-5 checkpoint still has a level to save.

Retrieval depends only on the root token: the largest template is gathered level by level for every row, in the
same jit as the drafting, and each row keeps the prefix of the templates' priority order its stage allows.

Merge (trie union, `graft_retrieved`): a retrieved node whose (parent, token) equals a node already in the tree (a
kept draft node, or an earlier retrieved one) is merged into it: its retrieved descendants hang under that node and
it takes no slot. Its slot goes to the next retrieved candidate in priority order; the largest stage has no further
candidate, so there it stays invalid. The child map stays single-valued and the draft part is untouched, so the
graft tree contains the eagle3_pruned tree: verification (the shared rule of jspec.verify) accepts at least as long
a path from the same context.

`fixed_split=K` is the ablation without adaptive pruning: every step the full tree is drafted, its best K nodes are
kept and a (budget − K)-slot template is retrieved.

The state is the EAGLE-3 drafter state (rebuilt for each call), the thresholds τ (traced, so a calibrated state
needs no recompilation) and, for graft, the adjacency matrix, updated after every verification from every verified
node exactly as Token Recycling's and kept across prompts. `calibrate` fits τ on a warm-up run of the dense tree.
"""

import dataclasses
import os
import pathlib
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from jspec.errors import UserError
from jspec.methods.base import Context, Method
from jspec.methods.eagle3 import Eagle3, Eagle3State
from jspec.retrieval import adjacency
from jspec.retrieval.templates import K, GraftStages, graft_stages, graft_templates
from jspec.tree import Tree, from_parents

# Placeholders until `jspec calibrate`: [DART]'s defaults (a third party's reading of the paper, unverified).
DEFAULT_THRESHOLDS = (0.35, 0.25, 0.15)
FORMAT = "jspec-graft"
VERSION = 1


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class GraftState:
    draft: Eagle3State | None  # per call (`resume_state` rebuilds it); None in a loaded state
    thresholds: Float[Array, "*B C"]  # τ of each checkpoint ([B, C]: per row); c_d < τ_d prunes, 0 never does
    adjacency: adjacency.Adjacency | None  # graft only


@dataclasses.dataclass(frozen=True)
class Eagle3Pruned(Eagle3):
    """EAGLE-3's tree pruned at the checkpoints; the freed slots stay empty."""

    name: str = "eagle3_pruned"
    depth: int = 7
    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS

    def __post_init__(self):
        checkpoints = self.checkpoints  # validates the budget
        if len(self.thresholds) != len(checkpoints) or not all(t >= 0 for t in self.thresholds):
            raise UserError(f"{self.name} needs {len(checkpoints)} thresholds >= 0 (checkpoints at depths "
                            f"{checkpoints}), got {self.thresholds}")

    @property
    def checkpoints(self) -> tuple[int, ...]:
        return graft_stages(self.budget).checkpoints

    @property
    def stages(self) -> GraftStages:
        """The split drafting uses: one stage per checkpoint, then the unpruned one."""
        return graft_stages(self.budget)

    def init_state(self, params, batch: int, max_cache_len: int) -> GraftState:
        return GraftState(draft=super().init_state(params, batch, max_cache_len),
                          thresholds=jnp.asarray(self.thresholds, jnp.float32), adjacency=None)

    def resume_state(self, params, state: GraftState, batch: int, max_cache_len: int) -> GraftState:
        return dataclasses.replace(state, draft=Eagle3.init_state(self, params, batch, max_cache_len))

    def prefill(self, params, state: GraftState, tokens, prompt_lens, first_token, features) -> GraftState:
        return dataclasses.replace(state, draft=super().prefill(params, state.draft, tokens, prompt_lens, first_token,
                                                                features))

    def pruned_tree(self, params, state: GraftState, ctx: Context):
        """(draft tree with the stage's draft nodes, its DraftTreeInfo, state)."""
        s = self.stages
        tree, info, draft = self.draft_tree(params, state.draft, ctx, checkpoints=s.checkpoints,
                                            thresholds=state.thresholds if s.checkpoints else None, keep=s.draft)
        return tree, info, dataclasses.replace(state, draft=draft)

    def propose(self, params, state: GraftState, ctx: Context):
        tree, _, state = self.pruned_tree(params, state, ctx)
        return tree, state

    def observe(self, params, state: GraftState, tree, logits, acceptance, features) -> GraftState:
        return dataclasses.replace(state, draft=super().observe(params, state.draft, tree, logits, acceptance,
                                                                features))

    def save_state(self, state: GraftState, path: str) -> None:
        """Thresholds (and graft's adjacency matrix) in one file, written atomically."""
        path = pathlib.Path(path)
        arrays = dict(format=np.array(FORMAT), version=np.array(VERSION),
                      checkpoints=np.array(self.checkpoints, np.int32),
                      thresholds=np.asarray(state.thresholds, np.float32))
        if state.adjacency is not None:
            arrays.update(vocab_size=np.array(state.adjacency.vocab_size), table=np.asarray(state.adjacency.table))
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)

    def load_state(self, path: str) -> GraftState:
        thresholds, _ = self._read_state(path)
        return GraftState(draft=None, thresholds=jnp.asarray(thresholds), adjacency=None)

    def _read_state(self, path: str) -> tuple[np.ndarray, np.ndarray | None]:
        path = pathlib.Path(path)
        if not path.is_file():
            raise UserError(f"{self.name} state file {path} not found")
        try:
            with np.load(path, allow_pickle=False) as f:
                if str(f["format"]) != FORMAT or int(f["version"]) != VERSION:
                    raise KeyError(f"format {f['format']} version {f['version']}")
                checkpoints, thresholds = f["checkpoints"], f["thresholds"].astype(np.float32)
                table = (f["table"], int(f["vocab_size"])) if "table" in f else None
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
            raise UserError(f"{path} is not a readable {FORMAT} state file (written by `jspec calibrate --method "
                            f"graft`): {e}") from e
        want = self.checkpoints
        if tuple(checkpoints.tolist()) != want or thresholds.shape != (len(want),) or not np.all(thresholds >= 0):
            raise UserError(f"{path}: thresholds {thresholds.tolist()} at checkpoints {checkpoints.tolist()} do not "
                            f"fit {self.name} (checkpoints {want})")
        if table is not None:
            table, vocab = table
            if table.ndim != 2 or table.shape[0] != vocab or table.size and (table.min() < 0 or table.max() >= vocab):
                raise UserError(f"{path} is corrupt: adjacency table {list(table.shape)} for a vocabulary of {vocab}")
        return thresholds, None if table is None else table


@dataclasses.dataclass(frozen=True)
class Graft(Eagle3Pruned):
    """Pruned EAGLE-3 tree + retrieved candidates in the freed slots, adjacency matrix updated online."""

    name: str = "graft"
    vocab_size: int = 0  # set from the target by methods.build
    k: int = K
    fixed_split: int | None = None  # draft nodes kept every step, no adaptive pruning (the ablation)

    def __post_init__(self):
        super().__post_init__()
        if self.k < K:
            raise UserError(f"graft's templates reach successor rank {K - 1}: the adjacency matrix needs k >= {K}")
        pool = graft_templates().pool.size
        if self.fixed_split is not None and not max(0, self.budget - pool) <= self.fixed_split < self.budget:
            raise UserError(f"--fixed-split is the number of draft nodes kept: {max(0, self.budget - pool)}.."
                            f"{self.budget - 1} at budget {self.budget} (the retrieval templates hold {pool} slots), "
                            f"got {self.fixed_split}")

    @property
    def stages(self) -> GraftStages:
        if self.fixed_split is None:
            return graft_stages(self.budget)
        return GraftStages(checkpoints=(), draft=(self.fixed_split,), retrieve=(self.budget - self.fixed_split,))

    @property
    def max_depth(self) -> int:
        return max(self.depth, int(graft_templates().depths.max()))

    def init_state(self, params, batch: int, max_cache_len: int) -> GraftState:
        if self.vocab_size < 1:
            raise UserError("graft needs the target's vocabulary size")
        return dataclasses.replace(super().init_state(params, batch, max_cache_len),
                                   adjacency=adjacency.init(self.vocab_size, self.k))

    def propose(self, params, state: GraftState, ctx: Context):
        tree, info, state = self.pruned_tree(params, state, ctx)
        s, t = self.stages, graft_templates()
        size = max(s.retrieve)
        # Independent of the drafting above (only the root token): XLA is free to overlap the two.
        retrieved = adjacency.retrieve(state.adjacency, ctx.root, t.pool.parents, t.pool.ranks)[:, t.order[:size]]
        kept, quota = (jnp.asarray(x, jnp.int32)[info.stage] for x in (s.draft, s.retrieve))
        tree = graft_retrieved(tree, kept, retrieved, t.parents[:size], t.depths[:size], quota - 1, self.max_depth)
        return tree, state

    def observe(self, params, state: GraftState, tree, logits, acceptance, features) -> GraftState:
        state = super().observe(params, state, tree, logits, acceptance, features)
        return dataclasses.replace(state, adjacency=adjacency.update(state.adjacency, tree.tokens, tree.valid,
                                                                     logits))

    def load_state(self, path: str) -> GraftState:
        thresholds, table = self._read_state(path)
        if table is None:
            raise UserError(f"{path} holds thresholds only (saved by eagle3_pruned): graft needs its adjacency matrix")
        if table.shape != (self.vocab_size, self.k):
            raise UserError(f"{path} holds a {list(table.shape)} adjacency matrix; this model needs "
                            f"[{self.vocab_size}, {self.k}]")
        return GraftState(draft=None, thresholds=jnp.asarray(thresholds),
                          adjacency=adjacency.Adjacency(jnp.asarray(table, jnp.int32)))


def graft_retrieved(draft: Tree, first_slot: Int[Array, " B"], tokens: Int[Array, "B R"], parents: np.ndarray,
                    depths: np.ndarray, quota: Int[Array, " B"], max_depth: int) -> Tree:
    """Trie union of a draft tree and a retrieval template (module docstring, "Merge").

    `tokens` are the template's tokens in priority order, node 0 the root (= the draft root), `parents` / `depths`
    its static shape in the same order. The first `quota[b]` retrieved nodes that do not merge take slots
    `first_slot[b] + 1, ...`, which must be free (invalid) in `draft` and below its size.
    """
    b, n = draft.tokens.shape
    rows = jnp.arange(b)[:, None]
    merged_id = jnp.zeros(tokens.shape, jnp.int32)  # node each template node became: draft slot, or n + own index
    parent_id = jnp.zeros(tokens.shape, jnp.int32)
    own = jnp.zeros(tokens.shape, bool)  # needs a slot of its own
    for level in range(1, int(depths.max(initial=0)) + 1):
        u = np.flatnonzero(depths == level)  # ascending: priority order within the level
        tok, par = tokens[:, u], merged_id[:, parents[u]]
        in_draft = (draft.valid[:, None, :] & (draft.parents[:, None, :] == par[:, :, None])
                    & (draft.tokens[:, None, :] == tok[:, :, None]))  # [B, L, N]
        # The first node of this level with the same parent and token (itself if none earlier).
        first = jnp.argmax((par[:, :, None] == par[:, None, :]) & (tok[:, :, None] == tok[:, None, :]), axis=-1)
        merged_id = merged_id.at[:, u].set(jnp.where(jnp.any(in_draft, -1), jnp.argmax(in_draft, -1),
                                                     n + jnp.asarray(u)[first]))
        parent_id = parent_id.at[:, u].set(par)
        own = own.at[:, u].set(~jnp.any(in_draft, -1) & (first == jnp.arange(len(u))))
    rank = jnp.cumsum(own, axis=1)
    kept = own & (rank <= quota[:, None])
    slot = first_slot[:, None] + rank
    parent_slot = jnp.where(parent_id < n, parent_id, jnp.take_along_axis(slot, jnp.maximum(parent_id - n, 0), 1))
    dst = jnp.where(kept, slot, n)  # n: dropped
    return from_parents(draft.tokens.at[rows, dst].set(tokens, mode="drop"),
                        draft.parents.at[rows, dst].set(parent_slot, mode="drop"),
                        draft.valid.at[rows, dst].set(True, mode="drop"), max_depth=max_depth)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class CalibrationLog:
    """Per step of a batch-1 warm-up run: each checkpoint's log-confidence and how deep the accepted path went."""

    log_conf: Float[Array, "B S C"]  # log c_d (best cumulative log-prob of the checkpoint's level); -inf past depth
    accepted: Int[Array, "B S"]  # accepted draft tokens (path length without the root)
    steps: Int[Array, " B"]
    pending: Float[Array, "B C"]  # this step's confidences: set by propose, logged by observe


@dataclasses.dataclass(frozen=True)
class _Recording(Method):
    """Decodes with `method`'s dense tree (no pruning, no retrieval) and logs every step; graft's observe still
    warms the adjacency matrix from every verified node."""

    name: str = "graft-calibration"
    method: Eagle3Pruned | None = None

    @property
    def tree_size(self) -> int:
        return self.method.tree_size

    @property
    def max_depth(self) -> int:
        return self.method.max_depth

    @property
    def target_taps(self) -> tuple[int, ...]:
        return self.method.target_taps

    def _log(self, batch: int, max_cache_len: int) -> CalibrationLog:
        c = len(self.method.checkpoints)
        return CalibrationLog(log_conf=jnp.zeros((batch, max_cache_len, c)),
                              accepted=jnp.zeros((batch, max_cache_len), jnp.int32),
                              steps=jnp.zeros((batch,), jnp.int32), pending=jnp.zeros((batch, c)))

    def init_state(self, params, batch: int, max_cache_len: int):
        return self.method.init_state(params, batch, max_cache_len), self._log(batch, max_cache_len)

    def resume_state(self, params, state, batch: int, max_cache_len: int):
        return self.method.resume_state(params, state[0], batch, max_cache_len), self._log(batch, max_cache_len)

    def prefill(self, params, state, tokens, prompt_lens, first_token, features):
        return self.method.prefill(params, state[0], tokens, prompt_lens, first_token, features), state[1]

    def propose(self, params, state, ctx: Context):
        inner, log = state
        tree, info, draft = self.method.draft_tree(params, inner.draft, ctx)
        levels = [d + 1 for d in self.method.checkpoints]
        conf = jnp.stack([info.best_by_depth[:, lv] if lv <= self.method.depth else
                          jnp.full(ctx.root.shape, -jnp.inf) for lv in levels], axis=1)
        return tree, (dataclasses.replace(inner, draft=draft), dataclasses.replace(log, pending=conf))

    def observe(self, params, state, tree, logits, acceptance, features):
        inner, log = state
        rows = jnp.arange(log.steps.shape[0])
        log = CalibrationLog(log_conf=log.log_conf.at[rows, log.steps].set(log.pending, mode="drop"),
                             accepted=log.accepted.at[rows, log.steps].set(acceptance.path_len - 1, mode="drop"),
                             steps=log.steps + 1, pending=log.pending)
        return self.method.observe(params, inner, tree, logits, acceptance, features), log


def fit_thresholds(log_conf: Float[np.ndarray, "S C"], accepted: Int[np.ndarray, " S"],
                   checkpoints: tuple[int, ...]) -> np.ndarray:
    """τ_d = the confidence at which the chance that the accepted draft path goes past checkpoint d's level
    (accepted >= d + 2 draft tokens, so stopping there would have lost tokens) falls to 0.5.

    The chance is a logistic regression on log c_d (Newton's method with a small ridge on the slope: deterministic,
    finite on separable data). If the path always (never) went past, τ = 0 (1); if the fitted chance does not grow
    with confidence, τ is 0 or 1 by the overall rate.
    """
    taus = []
    for i, d in enumerate(checkpoints):
        x = np.maximum(np.asarray(log_conf[:, i], np.float64), np.log(1e-12))  # -inf: the level was never drafted
        y = (np.asarray(accepted) >= d + 2).astype(np.float64)
        rate = y.mean() if len(y) else 0.0
        if rate in (0.0, 1.0) or x.std() == 0:
            taus.append(float(rate < 0.5))
            continue
        mu, sd = x.mean(), x.std()
        z = np.stack([(x - mu) / sd, np.ones_like(x)], axis=1)
        w = np.zeros(2)
        for _ in range(100):
            p = 1 / (1 + np.exp(-z @ w))
            ridge = np.diag([1e-3, 0.0]) * len(y)
            step = np.linalg.solve(z.T @ (z * (p * (1 - p))[:, None]) + ridge, z.T @ (y - p) - ridge @ w)
            w += step
            if np.abs(step).max() < 1e-10:
                break
        if w[0] <= 0:
            taus.append(float(rate < 0.5))
        else:
            taus.append(float(np.clip(np.exp(mu - sd * w[1] / w[0]), 0.0, 1.0)))
    return np.asarray(taus, np.float32)


def calibrate(model, method: Eagle3Pruned, params, pool: list[list[int]], *, warmup: int = 5,
              max_new_tokens: int = 256, seed: int = 0, progress: bool = True) -> tuple[GraftState, dict]:
    """Graft's warm-up: `warmup` prompts drawn from `pool` with `seed`, each decoded greedily with the dense tree
    (batch 1); fits τ with `fit_thresholds` and warms graft's adjacency matrix. Returns the state (save it with
    `method.save_state`) and the per-step log {"log_conf": [S, C], "accepted": [S]}."""
    from tqdm import tqdm

    from jspec.runner import run_batch
    from jspec.sampling import Sampling

    if not pool:
        raise UserError("calibration needs at least one prompt")
    rng = np.random.default_rng(seed)
    prompts = [pool[i] for i in sorted(rng.choice(len(pool), min(warmup, len(pool)), replace=False))]
    recorder = _Recording(method=method)
    width = max(map(len, prompts))  # one padded width and cache length: one compilation for every prompt
    state, confs, accepted = None, [], []
    bar = tqdm(prompts, desc=f"{method.name} calibration", unit="prompt", disable=not progress)
    for i, ids in enumerate(bar):
        [rec], state = run_batch(model, recorder, [ids], max_new_tokens=max_new_tokens, sampling=Sampling(),
                                 seed=seed + i, max_cache_len=width + max_new_tokens + method.tree_size,
                                 method_params=params, method_state=state, pad_to=width)
        log = jax.device_get(state[1])
        n = int(log.steps[0])
        confs.append(log.log_conf[0, :n])
        accepted.append(log.accepted[0, :n])
        bar.set_postfix(mat=f"{rec['mat']:.2f}")
    stats = {"log_conf": np.concatenate(confs), "accepted": np.concatenate(accepted)}
    thresholds = fit_thresholds(stats["log_conf"], stats["accepted"], method.checkpoints)
    return GraftState(draft=None, thresholds=jnp.asarray(thresholds), adjacency=state[0].adjacency), stats
