"""Static retrieval trees (Token Recycling): each node is a path of successor ranks from the root.

A template is a tree in BFS order: node 0 is the root, `parents[i] < i`, depths never decrease, and node i's token
is entry `ranks[i]` of its parent's adjacency row. Retrieval then needs one gather per depth level.
"""

import dataclasses

import numpy as np

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


def tr_prefix(size: int) -> Template:
    """The first `size` slots of the 2.2.2 tree (root included): a BFS prefix keeps every parent."""
    if not 1 <= size <= TR_SIZE:
        raise UserError(f"a Token Recycling tree has 1..{TR_SIZE} slots, got {size}")
    return Template.from_paths(_paths(TR_222)[: size - 1])


def template(name: str) -> Template:
    """`"tr-2.2.2"`: the 81-slot Token Recycling tree; `"tr-60"`: its first 59 nodes + root (a 60-slot budget)."""
    if name == "tr-2.2.2":
        return tr_prefix(TR_SIZE)
    if name == "tr-60":
        return tr_prefix(60)
    raise UserError(f"unknown template {name!r}; expected 'tr-2.2.2' or 'tr-60'")
