"""Token Recycling's adjacency matrix: for every token, the target's top-k next tokens the last time it was verified.

The table lives on device as a `[V, k]` int32 pytree carried through the decode loop (never reset between prompts:
"hot start"). Cold rows are all zeros, i.e. they point at token 0, as in Token Recycling.

Update rule: after a verification forward, every valid tree node's row is overwritten with the top-k of the
target's logits at that node. Duplicate policy: when one token occurs at several valid nodes of the same update
(within a row or across batch rows), the LAST valid occurrence in flattened (b, n) order wins. This makes the
update deterministic on every backend (Token Recycling's CUDA scatter leaves the winner unspecified).
"""

import dataclasses
import os
import pathlib
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from jspec.errors import UserError
from jspec.retrieval.templates import Template
from pallas_kernels.adjacency_update import adjacency_update, adjacency_update_reference
from pallas_kernels.adjacency_update.api import KERNEL_PLATFORMS

FORMAT = "jspec-adjacency"
VERSION = 1


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Adjacency:
    table: Int[Array, "V k"]  # int32; row t = successors of token t, best first

    @property
    def vocab_size(self) -> int:
        return self.table.shape[0]

    @property
    def k(self) -> int:
        return self.table.shape[1]


def init(vocab_size: int, k: int = 8) -> Adjacency:
    return Adjacency(jnp.zeros((vocab_size, k), jnp.int32))


def reset(adj: Adjacency) -> Adjacency:
    return Adjacency(jnp.zeros_like(adj.table))


def _flatten(adj: Adjacency, tokens, valid, logits):
    b, n, vocab = logits.shape
    if tokens.shape != (b, n) or valid.shape != (b, n) or vocab != adj.vocab_size:
        raise ValueError(f"adjacency update: tokens {tokens.shape}, valid {valid.shape}, logits {logits.shape} "
                         f"do not match each other or the table {adj.table.shape}")
    return tokens.reshape(b * n).astype(jnp.int32), valid.reshape(b * n), logits.reshape(b * n, vocab)


def update(adj: Adjacency, tokens: Int[Array, "B N"], valid: Bool[Array, "B N"], logits: Float[Array, "B N V"], *,
           use_kernel: bool | None = None) -> Adjacency:
    """`table[tokens[b, n]] = top_k(logits[b, n], k)` for valid nodes (descending, ties to the lower id).

    `use_kernel=None` uses the fused Pallas top-k on GPU/TPU and the reference elsewhere; `True` on CPU runs the GPU
    kernel in interpret mode (slow; for tests).
    """
    tokens, valid, logits = _flatten(adj, tokens, valid, logits)
    accelerated = jax.default_backend() in KERNEL_PLATFORMS
    if use_kernel is None:
        use_kernel = accelerated
    if not use_kernel:
        return Adjacency(adjacency_update_reference(adj.table, tokens, valid, logits))
    if accelerated:
        return Adjacency(adjacency_update(adj.table, tokens, valid, logits))
    return Adjacency(adjacency_update(adj.table, tokens, valid, logits, platform="gpu", interpret=True))


def update_reference(adj: Adjacency, tokens: Int[Array, "B N"], valid: Bool[Array, "B N"],
                     logits: Float[Array, "B N V"]) -> Adjacency:
    """`update` through `jax.lax.top_k` and the same deterministic scatter."""
    return Adjacency(adjacency_update_reference(adj.table, *_flatten(adj, tokens, valid, logits)))


def retrieve(adj: Adjacency, roots: Int[Array, " B"], parents: np.ndarray, ranks: np.ndarray) -> Int[Array, "B N"]:
    """Fills a static template: tokens[:, 0] = roots, tokens[:, i] = table[tokens[:, parents[i]], ranks[i]].

    One gather per depth level (a BFS template keeps every level contiguous and its parents in the level above).
    """
    t = Template.from_parents(parents, ranks)
    if t.ranks.max() >= adj.k:
        raise ValueError(f"template ranks reach {t.ranks.max()}, the table has k={adj.k}")
    levels = [roots.astype(jnp.int32)[:, None]]
    prev_lo = 0
    for lo, hi in t.levels:
        levels.append(adj.table[levels[-1][:, t.parents[lo:hi] - prev_lo], t.ranks[lo:hi]])
        prev_lo = lo
    return jnp.concatenate(levels, axis=1)


def save(adj: Adjacency, path: str | os.PathLike) -> None:
    """Writes the table with a format tag and its shape (atomically: a crash leaves the old file)."""
    path = pathlib.Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, format=np.array(FORMAT), version=np.array(VERSION), vocab_size=np.array(adj.vocab_size),
                 k=np.array(adj.k), table=np.asarray(adj.table, np.int32))
    os.replace(tmp, path)


def load(path: str | os.PathLike, vocab_size: int | None = None, k: int | None = None) -> Adjacency:
    """Reads a table written by `save`; `vocab_size` / `k`, when given, must match the file (the model's vocabulary).

    Raises `UserError` for a missing, corrupt or mismatching file.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise UserError(f"adjacency file {path} not found")
    try:
        with np.load(path, allow_pickle=False) as f:
            meta = {name: f[name] for name in ("format", "version", "vocab_size", "k")}
            if str(meta["format"]) != FORMAT:
                raise KeyError("format")
            table = f["table"]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise UserError(f"{path} is not a readable jspec adjacency file (corrupt or wrong format: {e})") from e
    if int(meta["version"]) != VERSION:
        raise UserError(f"{path}: adjacency format version {int(meta['version'])} is not supported (want {VERSION})")
    file_vocab, file_k = int(meta["vocab_size"]), int(meta["k"])
    if table.shape != (file_vocab, file_k) or not np.issubdtype(table.dtype, np.integer) or (
            table.size and (table.min() < 0 or table.max() >= file_vocab)):
        raise UserError(f"{path} is corrupt: table {table.dtype}{list(table.shape)} does not hold token ids for "
                        f"vocab_size={file_vocab}, k={file_k}")
    if vocab_size is not None and file_vocab != vocab_size:
        raise UserError(f"{path} was built for a vocabulary of {file_vocab} tokens, but the model has {vocab_size}")
    if k is not None and file_k != k:
        raise UserError(f"{path} holds {file_k} successors per token, expected k={k}")
    return Adjacency(jnp.asarray(table, jnp.int32))
