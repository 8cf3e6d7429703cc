"""Static retrieval trees (Token Recycling, Graft's stages): each node is a path of successor ranks from the root.

A template is a tree in BFS order: node 0 is the root, `parents[i] < i`, depths never decrease, and node i's token
is entry `ranks[i]` of its parent's adjacency row. Retrieval then needs one gather per depth level.
"""

import dataclasses
import functools
import json
import pathlib

import numpy as np
import yaml

from jspec.errors import UserError

K = 8  # successors per adjacency row

# Token Recycling "2.2.2" (Luowaterbi/TokenRecycling, model/recycling/tree_template_.py), one string per depth level;
# each word is a node's rank path, one digit per step, e.g. "012" = rank-0 child of the root, its rank-1 child,
# that node's rank-2 child. Widths 8, 21, 25, 15, 8, 3: 80 nodes + root.
TR_222 = (
    "0 1 2 3 4 5 6 7",
    "00 01 02 03 04 05 06 07 10 11 12 13 20 21 22 30 31 40 50 60 70",
    "000 001 002 003 004 005 006 007 010 011 012 020 021 030 040 050 060 070 100 101 110 200 300 400 500",
    "0000 0001 0002 0003 0004 0010 0011 0020 0030 0040 0100 0200 1000 2000 3000",
    "00000 00001 00002 00010 00020 00100 01000 10000",
    "000000 000001 000100",
)


@dataclasses.dataclass(frozen=True, eq=False)
class Template:
    parents: np.ndarray  # [size] int32, -1 for the root
    ranks: np.ndarray  # [size] int32, 0 for the root
    depths: np.ndarray  # [size] int32, 0 for the root

    def __post_init__(self):
        for name in ("parents", "ranks", "depths"):  # private read-only copies: the template is a constant
            a = np.array(getattr(self, name), np.int32)
            a.setflags(write=False)
            object.__setattr__(self, name, a)
        size = len(self.parents)
        if size < 1 or not (len(self.ranks) == len(self.depths) == size):
            raise ValueError("template arrays must be non-empty and of equal length")
        if self.parents[0] != -1 or self.depths[0] != 0:
            raise ValueError("node 0 must be the root (parent -1, depth 0)")
        child = np.arange(1, size)
        if np.any(self.parents[1:] < 0) or np.any(self.parents[1:] >= child):
            raise ValueError("every parent must precede its child")
        if np.any(self.ranks[1:] < 0) or np.any(self.ranks >= K):
            raise ValueError(f"ranks must lie in [0, {K})")
        if np.any(self.depths[1:] != self.depths[self.parents[1:]] + 1):
            raise ValueError("depths must be the parent's depth + 1")
        if np.any(np.diff(self.depths) < 0):
            raise ValueError("nodes must be in BFS order (non-decreasing depth)")

    @property
    def size(self) -> int:
        return len(self.parents)

    @property
    def widths(self) -> tuple[int, ...]:
        """Nodes per depth level below the root."""
        return tuple(int(w) for w in np.bincount(self.depths)[1:])

    @property
    def levels(self) -> list[tuple[int, int]]:
        """[lo, hi) node range of each depth level below the root."""
        bounds = np.searchsorted(self.depths, np.arange(1, self.depths[-1] + 2))
        return [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]

    @classmethod
    def from_parents(cls, parents: np.ndarray, ranks: np.ndarray) -> "Template":
        parents = np.asarray(parents)
        depths = np.zeros(len(parents), np.int32)
        for i in range(1, len(parents)):
            depths[i] = depths[parents[i]] + 1 if 0 <= parents[i] < i else -1  # -1: rejected by validation
        return cls(parents, ranks, depths)

    @classmethod
    def from_paths(cls, paths: list[tuple[int, ...]]) -> "Template":
        """The root plus one node per rank path; a path's prefix must come before it."""
        index = {(): 0}
        parents, ranks, depths = [-1], [0], [0]
        for path in paths:
            if path in index or path[:-1] not in index:
                raise ValueError(f"rank path {path} is repeated or comes before its parent")
            index[path] = len(parents)
            parents.append(index[path[:-1]])
            ranks.append(path[-1])
            depths.append(len(path))
        return cls(np.array(parents), np.array(ranks), np.array(depths))


def _paths(levels: tuple[str, ...]) -> list[tuple[int, ...]]:
    return [tuple(int(c) for c in word) for level in levels for word in level.split()]


TR_SIZE = 81

# Deeper nodes around 2.2.2's long paths, for measuring which of them pay (`tr_deep`): on code the rank-0 chain
# keeps being accepted past 2.2.2's depth 6. Each word extends a path already present (in this or 2.2.2's list).
TR_DEEP_EXTRA = (
    "000002 000010 000020 001000 010000 100000 000200",
    "0000000 0000001 0000002 0000010 0000100 0001000 0010000 0100000 1000000 0000020",
    "00000000 00000001 00000002 00000010 00000100 00001000 00010000",
    "000000000 000000001 000000010",
    "0000000000",
)


def tr_prefix(size: int) -> Template:
    """The first `size` slots of the 2.2.2 tree (root included): a BFS prefix keeps every parent."""
    if not 1 <= size <= TR_SIZE:
        raise UserError(f"a Token Recycling tree has 1..{TR_SIZE} slots, got {size}")
    return Template.from_paths(_paths(TR_222)[: size - 1])


def tr_deep() -> Template:
    """2.2.2 plus `TR_DEEP_EXTRA` (109 slots, depth 10), in BFS order: a superset to count accepted nodes on."""
    paths = _paths(TR_222) + _paths(TR_DEEP_EXTRA)
    return Template.from_paths(sorted(paths, key=len))  # stable: 2.2.2's order first within a depth


def words(t: Template) -> list[str]:
    """Each node's rank path as a word ("" for the root, "01" for the root's rank-0 child's rank-1 child)."""
    out = [""]
    for parent, rank in zip(t.parents[1:], t.ranks[1:]):
        out.append(out[parent] + str(rank))
    return out


def best_subtree(base: Template, counts: np.ndarray, size: int) -> Template:
    """The `size`-slot subtree of `base` (root included) whose nodes were accepted most often: grown from the root,
    always taking the most-accepted child of the nodes taken so far (ties: shallower, then earlier), so it is
    ancestor-closed; in BFS order."""
    if not 1 <= size <= base.size or len(counts) != base.size:
        raise ValueError(f"a subtree of 1..{base.size} slots needs {base.size} counts; got {size} and {len(counts)}")
    children = [[] for _ in range(base.size)]
    for i in range(1, base.size):
        children[base.parents[i]].append(i)
    taken, frontier = [0], list(children[0])
    while len(taken) < size:
        best = min(frontier, key=lambda i: (-counts[i], base.depths[i], i))
        frontier.remove(best)
        taken.append(best)
        frontier += children[best]
    taken.sort(key=lambda i: (base.depths[i], i))  # BFS order: depth, then the base's order within a level
    paths = words(base)
    return Template.from_paths([tuple(int(c) for c in paths[i]) for i in taken[1:]])


def read_tree(path: str | pathlib.Path) -> tuple[str, ...]:
    """Rank paths of a tree file: the JSON of `jspec calibrate --tree-out` / `bench/tr_node_stats.py` (its "chosen"
    subtree) or whitespace-separated words ("0 1 00 ..."), the root left out."""
    path = pathlib.Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise UserError(f"tree file {path}: {e.strerror or e}") from None
    if path.suffix == ".json":
        try:
            chosen = json.loads(text)["chosen"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise UserError(f"tree file {path}: not a tree report (no \"chosen\" list)") from None
        return tuple(str(w) for w in chosen)
    tree = tuple(text.split())
    if not tree:
        raise UserError(f"tree file {path} is empty")
    return tree


def template(name: str) -> Template:
    """`"tr-2.2.2"`: the 81-slot Token Recycling tree; `"tr-60"`: its first 59 nodes + root (a 60-slot budget);
    `"tr-deep"`: 2.2.2 with deeper paths (`tr_deep`)."""
    if name == "tr-2.2.2":
        return tr_prefix(TR_SIZE)
    if name == "tr-60":
        return tr_prefix(60)
    if name == "tr-deep":
        return tr_deep()
    raise UserError(f"unknown template {name!r}; expected 'tr-2.2.2', 'tr-60' or 'tr-deep'")


@dataclasses.dataclass(frozen=True, eq=False)
class GraftTemplates:
    """Graft's nested stage templates (configs/graft/templates.yaml) as one pool with a priority order.

    `pool` is the largest template in BFS order (retrieval gathers it level by level). `order` lists the pool's
    nodes by priority: the smallest template first, then what each larger one adds, each part in BFS order, so every
    prefix of the order is a tree and each stage's template is the prefix of its size.
    """

    pool: Template
    order: np.ndarray  # [pool.size] pool index of each priority position; order[0] = 0 (the root)
    parents: np.ndarray  # [pool.size] priority position of each priority node's parent; -1 for the root
    depths: np.ndarray  # [pool.size] depth of each priority node
    budget: int  # the budget `stage_sizes` are given for
    stage_sizes: tuple[tuple[int, int], ...]  # (checkpoint depth, template size incl. root), ascending depths


@dataclasses.dataclass(frozen=True)
class GraftStages:
    """Per-stage split of a verification budget; stage i < len(checkpoints) = pruned at checkpoints[i], the last
    stage = not pruned. `draft[i] + retrieve[i] == budget` (the root is counted once, in `retrieve`)."""

    checkpoints: tuple[int, ...]
    draft: tuple[int, ...]  # draft nodes kept (root excluded)
    retrieve: tuple[int, ...]  # retrieval template size, root included (1: nothing retrieved)


GRAFT_TEMPLATES_FILE = pathlib.Path("graft") / "templates.yaml"


@functools.cache
def graft_templates(path: pathlib.Path | None = None) -> GraftTemplates:
    """Reads and checks the Graft templates (default: configs/graft/templates.yaml)."""
    from jspec.config import configs_dir

    path = path or configs_dir() / GRAFT_TEMPLATES_FILE
    try:
        raw = yaml.safe_load(path.read_text())
        budget, stages = int(raw["budget"]), {int(d): int(n) for d, n in raw["stages"].items()}
        templates = {int(n): _paths(tuple(levels)) for n, levels in raw["templates"].items()}
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise UserError(f"cannot read Graft templates from {path}: {e}") from None
    sizes = sorted(templates)
    problems = [f"template {n} has {len(templates[n]) + 1} nodes with the root" for n in sizes
                if len(templates[n]) + 1 != n]
    problems += [f"template {a} is not contained in template {b}" for a, b in zip(sizes, sizes[1:])
                 if not set(templates[a]) <= set(templates[b])]
    problems += [f"stage size {n} has no template" for n in stages.values() if n not in templates]
    if budget < max(stages.values(), default=1) or sorted(stages.values(), reverse=True) != list(stages.values()):
        problems.append(f"stage sizes {stages} must shrink with depth and fit the budget {budget}")
    if problems:
        raise UserError(f"{path}: " + "; ".join(problems))
    priority, seen = [], set()
    for n in sizes:  # each part in its template's (BFS) order, so parents come first and every prefix is a tree
        priority += [p for p in templates[n] if p not in seen]
        seen.update(templates[n])
    try:
        pool = Template.from_paths(templates[sizes[-1]])
    except ValueError as e:
        raise UserError(f"{path}: {e}") from None
    index = {(): 0, **{p: i + 1 for i, p in enumerate(templates[sizes[-1]])}}
    position = {(): 0, **{p: i + 1 for i, p in enumerate(priority)}}
    return GraftTemplates(
        pool=pool, order=np.array([0] + [index[p] for p in priority], np.int32),
        parents=np.array([-1] + [position[p[:-1]] for p in priority], np.int32),
        depths=np.array([0] + [len(p) for p in priority], np.int32), budget=budget,
        stage_sizes=tuple(sorted(stages.items())))


def graft_stages(budget: int, templates: GraftTemplates | None = None) -> GraftStages:
    """The stage split for `budget` slots: the template sizes scale with budget / reference budget (rounded, at least
    the root) and the draft keeps the rest. Raises `UserError` when the budget is out of the templates' range."""
    t = templates or graft_templates()

    def split(b: int) -> tuple[int, ...]:
        return tuple(max(1, int(np.floor(n * b / t.budget + 0.5))) for _, n in t.stage_sizes) + (1,)

    limit = max((b for b in range(1, 4 * t.budget) if max(split(b)) <= t.pool.size), default=0)
    if not 1 <= budget <= limit:
        raise UserError(f"graft budget must be in 1..{limit} (the retrieval templates hold {t.pool.size} slots), "
                        f"got {budget}")
    retrieve = split(budget)
    return GraftStages(checkpoints=tuple(d for d, _ in t.stage_sizes), draft=tuple(budget - r for r in retrieve),
                       retrieve=retrieve)
