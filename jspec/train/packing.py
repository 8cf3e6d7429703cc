"""Training records packed into fixed [rows, seq_len] arrays: one compiled shape for every batch.

Records (tokens, loss mask) are laid end to end in a row while they fit, each numbered by a segment id (1, 2, ...;
0 = padding) with positions restarting at 0, so a segment-aware causal mask keeps them independent. A record longer
than a row is cut to the row length. Each epoch visits the training records in a permutation drawn from (seed,
epoch), so the batch stream is a pure function of the seed and a position (epoch, row) that checkpoints record.
"""

import dataclasses

import numpy as np
from jaxtyping import Bool, Int

Record = tuple[Int[np.ndarray, " L"], Bool[np.ndarray, " L"]]


@dataclasses.dataclass(frozen=True)
class Packed:
    tokens: Int[np.ndarray, "R T"]
    loss_mask: Bool[np.ndarray, "R T"]
    segments: Int[np.ndarray, "R T"]
    positions: Int[np.ndarray, "R T"]

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def rows(self, index: Int[np.ndarray, " N"]) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name)[index] for f in dataclasses.fields(self)}


def pack(records: list[Record], seq_len: int) -> Packed:
    """Greedy in order: a record goes into the current row if it fits, else starts a new one."""
    rows: list[list[Record]] = []
    used = 0
    for tokens, mask in records:
        tokens, mask = tokens[:seq_len], mask[:seq_len]
        if not rows or used + len(tokens) > seq_len:
            rows.append([])
            used = 0
        rows[-1].append((tokens, mask))
        used += len(tokens)
    shape = (len(rows), seq_len)
    out = Packed(tokens=np.zeros(shape, np.int32), loss_mask=np.zeros(shape, bool),
                 segments=np.zeros(shape, np.int32), positions=np.zeros(shape, np.int32))
    for r, row in enumerate(rows):
        at = 0
        for s, (tokens, mask) in enumerate(row, start=1):
            span = slice(at, at + len(tokens))
            out.tokens[r, span], out.loss_mask[r, span] = tokens, mask
            out.segments[r, span], out.positions[r, span] = s, np.arange(len(tokens))
            at += len(tokens)
    return out


def pad_rows(packed: Packed, multiple: int) -> Packed:
    """Appends all-padding rows up to a multiple of `multiple` (fixed-shape evaluation batches)."""
    extra = -len(packed) % multiple
    return Packed(*(np.concatenate([getattr(packed, f.name), np.zeros((extra, packed.tokens.shape[1]),
                                                                      getattr(packed, f.name).dtype)])
                    for f in dataclasses.fields(packed)))


class Batcher:
    """Endless batches of `batch_size` packed rows over epochs of shuffled records, from position (epoch, row)."""

    def __init__(self, records: list[Record], seq_len: int, batch_size: int, seed: int, epoch: int = 0, row: int = 0):
        self.records, self.seq_len, self.batch_size, self.seed = records, seq_len, batch_size, seed
        self.epoch, self.row = epoch, row
        self._packed = self._pack_epoch(epoch)

    def _pack_epoch(self, epoch: int) -> Packed:
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.records))
        return pack([self.records[i] for i in order], self.seq_len)

    @property
    def position(self) -> dict[str, int]:
        return {"epoch": self.epoch, "row": self.row}

    def next(self) -> dict[str, np.ndarray]:
        parts = []
        need = self.batch_size
        while need:
            take = min(need, len(self._packed) - self.row)
            parts.append(self._packed.rows(np.arange(self.row, self.row + take)))
            self.row += take
            need -= take
            if self.row == len(self._packed):
                self.epoch, self.row = self.epoch + 1, 0
                self._packed = self._pack_epoch(self.epoch)
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
