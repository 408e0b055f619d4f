"""Training batches of clean embeddings: shuffled, resumable, DDP-aware, prefetched (spec §2, §4).

Reads a complete embedding store (elf/embed/store.py) or embeds token ids on the fly; no files written.

    source = StoreSource(open_store("results/embeddings/owt/encoder/train.zarr"))
    batches = ShuffledBatches(source, batch_size=512, seed=42, rank=rank, world_size=world_size,
                              normalization="fixed", mean=0.0, std=0.2)
    for batch in batches:            # endless: epoch after epoch
        batch["x"]                   # (512 / world_size, L, d) float32, normalised
        ...
        checkpoint["data"] = batches.state_dict()   # resume: batches.load_state_dict(...)

Order. Epoch e visits the sequences in ``torch.randperm(N)`` drawn from a ``torch.Generator`` seeded by
(seed, e); global batch b of that epoch is positions b*B..(b+1)*B-1 (a trailing partial batch is dropped,
so every rank sees the same number of equal-sized batches), and rank r of W takes the r-th of W equal
slices. The order depends only on (seed, N, B), never on W, the prefetch depth or the source, so a
checkpoint resumed on another number of GPUs continues the same global sequence of batches.

Batches are dicts of CPU tensors: ``input_ids``, ``attention_mask``, ``cond_seq_mask`` (int64), ``x``
(normalised embeddings, float32), ``x_nosource`` (conditional data: target rows encoded without the
source, for label drop) and ``index`` (the dataset rows).

Sources (``StoreSource``, ``OnTheFlySource``) describe what they hold: ``dim``, ``seq_len``,
``conditional``, ``stats`` (normalisation statistics or None), ``store_identity`` and
``tokens_fingerprint`` (the identity of their input, recorded in a checkpoint's config.json).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import queue
import threading
import weakref
from typing import Any, Callable, Mapping

import numpy as np
import torch

from elf.embed.normalise import normalise
from elf.embed.store import (TOKEN_COLUMNS, EmbeddingStore, TokenArrays, from_storage, open_store)

IN_MEMORY_LIMIT_BYTES = 1 << 30
_PREFETCHING: "weakref.WeakSet[ShuffledBatches]" = weakref.WeakSet()


@atexit.register
def _stop_prefetch_threads() -> None:
    """A daemon thread killed inside a torch op at interpreter exit aborts the process: stop them first."""
    for batches in list(_PREFETCHING):
        batches.close()


def _token_tensors(cols: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {c: torch.from_numpy(np.asarray(cols[c], dtype=np.int64)) for c in TOKEN_COLUMNS}


# ---------------------------------------------------------------------------------------------------
# Sources: fetch(indices) -> tokens + raw (unnormalised) float32 embeddings
# ---------------------------------------------------------------------------------------------------

class StoreSource:
    """Rows of a complete store. A store of at most ``memory_limit`` bytes is loaded into memory once;
    otherwise its token arrays are, when they alone fit, and the rest is read per batch."""

    def __init__(self, store: EmbeddingStore | str | os.PathLike, in_memory: bool | None = None,
                 memory_limit: int = IN_MEMORY_LIMIT_BYTES):
        self.store = store if isinstance(store, EmbeddingStore) else open_store(store)
        self.conditional = self.store.conditional
        self.stats = self.store.stats
        self.dim, self.seq_len = self.store.dim, self.store.seq_len
        self.store_identity = self.store.identity_sha256
        self.tokens_fingerprint = None  # the store's identity covers its tokens
        layout = self.store.layout
        token_bytes = layout.num_sequences * layout.seq_len * 6
        auto = in_memory is None  # explicit False: read every array per batch
        if auto:
            in_memory = layout.total_bytes() <= memory_limit
        cached = (self.store.array_names if in_memory
                  else TOKEN_COLUMNS if auto and token_bytes <= memory_limit else ())
        self._memory = self.store.read_rows(0, len(self.store), cached) if cached else {}
        self._lazy = tuple(name for name in self.store.array_names if name not in self._memory)

    def __len__(self) -> int:
        return len(self.store)

    def fetch(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        indices = np.asarray(indices, dtype=np.int64)
        rows = {name: values[indices] for name, values in self._memory.items()}
        if self._lazy:
            rows.update(self.store.read_indices(indices, self._lazy))
        batch = _token_tensors(rows)
        batch["x"] = from_storage(rows["embeddings"], self.store.dtype)
        if self.conditional:
            batch["x_nosource"] = from_storage(rows["embeddings_nosource"], self.store.dtype)
        return batch


class OnTheFlySource:
    """Token rows embedded per batch by an Embedder (frozen, no gradient). ``embedder=None`` gives
    token-only batches (kind ``learned``: the trainer embeds with its own trainable table, of width
    ``dim``)."""

    def __init__(self, token_arrays: TokenArrays | Mapping[str, np.ndarray], embedder: torch.nn.Module | None,
                 stats: Mapping | None = None, *, device: str = "cpu", conditional: bool | None = None,
                 dim: int | None = None):
        self.tokens = token_arrays if isinstance(token_arrays, TokenArrays) else TokenArrays(token_arrays)
        self.embedder = embedder.to(device).eval() if embedder is not None else None
        self.stats, self.device = stats, device
        self.conditional = self.tokens.conditional if conditional is None else conditional
        self.dim = getattr(embedder, "dim", dim)
        self.seq_len = self.tokens.seq_len
        self.store_identity = None  # no store: the token data's fingerprint identifies the input

    @property
    def tokens_fingerprint(self) -> dict:
        """Identity of the token rows (``TokenArrays.fingerprint``), recorded in the checkpoint."""
        return self.tokens.fingerprint()

    def __len__(self) -> int:
        return len(self.tokens)

    @torch.no_grad()
    def fetch(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        batch = _token_tensors(self.tokens.take(np.asarray(indices, dtype=np.int64)))
        if self.embedder is None:
            return batch
        on_device = [batch[c].to(self.device) for c in TOKEN_COLUMNS]
        names = ("x", "x_nosource") if self.conditional else ("x",)
        for name in names:
            drop = torch.full((len(indices),), name == "x_nosource", dtype=torch.bool, device=self.device)
            batch[name] = self.embedder(*on_device, drop).float().cpu()
        return batch


# ---------------------------------------------------------------------------------------------------
# The shuffled, resumable batch iterator
# ---------------------------------------------------------------------------------------------------

def epoch_seed(seed: int, epoch: int) -> int:
    """A 63-bit generator seed for (seed, epoch): distinct pairs never share a permutation stream."""
    return int.from_bytes(hashlib.sha256(f"elf-batches:{seed}:{epoch}".encode()).digest()[:8], "little") >> 1


class ShuffledBatches:
    """Endless iterator of this rank's slice of each global batch; see the module docstring."""

    def __init__(self, store_or_source: Any, batch_size: int, seed: int, rank: int = 0, world_size: int = 1,
                 *, normalization: str = "fixed", mean: float = 0.0, std: float = 0.2, prefetch: int = 2,
                 transform: Callable[[dict, int, int], dict] | None = None):
        """``normalization``: ``fixed`` (mean/std as given; released configs 0, 0.2), ``scalar`` or
        ``per_channel`` (the source's statistics), applied by ``elf.embed.normalise.normalise``.
        ``prefetch``: batches prepared ahead by a background thread (0: none); never changes the order.
        ``transform(batch, epoch, position)``: applied to each batch where it is made (the prefetch
        thread), e.g. the encoder's span corruption; it must depend on nothing but its arguments."""
        source = store_or_source
        if isinstance(source, (EmbeddingStore, str, os.PathLike)):
            source = StoreSource(source)
        if batch_size % world_size:
            raise ValueError(f"global batch {batch_size} is not divisible by world size {world_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} not in 0..{world_size - 1}")
        if len(source) < batch_size:
            raise ValueError(f"{len(source)} sequences cannot fill one batch of {batch_size}")
        self.source, self.batch_size, self.seed = source, batch_size, seed
        self.rank, self.world_size, self.prefetch = rank, world_size, prefetch
        self.transform = transform
        self.normalization = (getattr(source, "stats", None), normalization, mean, std)
        normalise(torch.zeros(1), *self.normalization)  # fail now on a bad mode or missing statistics
        self.batches_per_epoch = len(source) // batch_size
        self.epoch, self.position = 0, 0          # the next batch the consumer will receive
        self._perm_cache: tuple[int, torch.Tensor] | None = None
        self._perm_lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._queue: queue.Queue | None = None
        self._stop = threading.Event()

    def __len__(self) -> int:
        return self.batches_per_epoch

    def __iter__(self) -> "ShuffledBatches":
        return self

    # --- order ------------------------------------------------------------------------------------

    def permutation(self, epoch: int) -> torch.Tensor:
        """The epoch's visiting order of all N sequences."""
        with self._perm_lock:
            if self._perm_cache is None or self._perm_cache[0] != epoch:
                gen = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))
                self._perm_cache = (epoch, torch.randperm(len(self.source), generator=gen))
            return self._perm_cache[1]

    def indices_at(self, epoch: int, position: int) -> np.ndarray:
        """Dataset rows of this rank's slice of global batch ``position`` of ``epoch``."""
        local = self.batch_size // self.world_size
        start = position * self.batch_size + self.rank * local
        return self.permutation(epoch)[start:start + local].numpy()

    def batch_at(self, epoch: int, position: int) -> dict[str, torch.Tensor]:
        """This rank's batch at (epoch, position), normalised; does not move the iterator."""
        indices = self.indices_at(epoch, position)
        batch = self.source.fetch(indices)
        for name in ("x", "x_nosource"):
            if name in batch:
                batch[name] = normalise(batch[name], *self.normalization)
        batch["index"] = torch.from_numpy(indices.astype(np.int64))
        return batch if self.transform is None else self.transform(batch, epoch, position)

    def _advance(self, epoch: int, position: int) -> tuple[int, int]:
        position += 1
        return (epoch + 1, 0) if position == self.batches_per_epoch else (epoch, position)

    # --- iteration with a prefetch thread ---------------------------------------------------------

    def __next__(self) -> dict[str, torch.Tensor]:
        if self.prefetch <= 0:
            batch = self.batch_at(self.epoch, self.position)
        else:
            if self._worker is None:
                self._start_worker()
            item = self._queue.get()
            if isinstance(item, BaseException):
                self.close()
                raise item
            where, batch = item
            assert where == (self.epoch, self.position), "prefetch out of order"
        self.epoch, self.position = self._advance(self.epoch, self.position)
        return batch

    def _start_worker(self) -> None:
        self._stop = threading.Event()
        self._queue = queue.Queue(maxsize=self.prefetch)
        # The worker holds only a weak reference, so a dropped iterator is collected and stops it.
        self._worker = threading.Thread(target=ShuffledBatches._produce, name="elf-batch-prefetch",
                                        daemon=True, args=(weakref.ref(self), self.epoch, self.position,
                                                           self._queue, self._stop))
        self._worker.start()
        _PREFETCHING.add(self)

    @staticmethod
    def _produce(owner_ref: weakref.ref, epoch: int, position: int, out: queue.Queue,
                 stop: threading.Event) -> None:
        """Worker: the batches from (epoch, position) on, in order, into ``out`` until stopped."""
        while not stop.is_set():
            owner = owner_ref()
            if owner is None:
                return
            try:
                item: Any = ((epoch, position), owner.batch_at(epoch, position))
            except BaseException as err:  # surfaced in the consumer's next()
                item = err
            epoch, position = owner._advance(epoch, position)
            del owner
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(item, BaseException):
                return

    def close(self) -> None:
        """Stop the prefetch thread (prefetched batches are discarded; the position is kept)."""
        if getattr(self, "_worker", None) is not None:
            self._stop.set()
            if self._worker is not threading.current_thread():
                self._worker.join()
            self._worker, self._queue = None, None

    def __del__(self) -> None:
        self.close()

    # --- checkpointing ----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The data position for a training checkpoint (next batch = epoch, position)."""
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed,
                "batch_size": self.batch_size, "num_sequences": len(self.source)}

    def load_state_dict(self, state: Mapping) -> None:
        """Continue exactly where ``state`` was taken (any world size; same seed, batch and data)."""
        for key, mine in (("seed", self.seed), ("batch_size", self.batch_size),
                          ("num_sequences", len(self.source))):
            if state[key] != mine:
                raise ValueError(f"data state has {key}={state[key]}, this reader has {mine}: "
                                 f"resuming would not continue the same batch order")
        if not 0 <= state["position"] < self.batches_per_epoch:
            raise ValueError(f"data state position {state['position']} outside 0..{self.batches_per_epoch - 1}")
        self.close()
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
