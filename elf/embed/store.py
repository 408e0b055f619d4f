"""Zarr embedding store: the cached clean embeddings ``x`` of one dataset split (spec §2, §8).

One store per dataset x embedding x split, e.g. ``results/embeddings/{dataset}/{embedding}/{split}.zarr``.
``elf embed`` (elf/stages/embed.py) writes it with ``create_store`` -> ``write_blocks`` -> ``finalize_store``;
the training reader (elf/embed/reader.py) reads it through ``open_store``, which refuses unfinished stores.

Layout (a zarr v3 group; N sequences of L tokens, embedding width d):

    input_ids            (N, L)     int32
    attention_mask       (N, L)     int8
    cond_seq_mask        (N, L)     int8   1 at source (conditioning) positions
    embeddings           (N, L, d)  float16 | float32 | bfloat16 (kept as its uint16 bit pattern:
                                    zarr 3.1 has no bfloat16; the array's ``dtype`` attribute says so)
    embeddings_nosource  (N, L, d)  conditional data only: every row encoded with drop_source=True, i.e.
                                    target rows without source visibility (label drop needs both, §2)
    block_stats          (n_blocks, 1 + 2d) float64: per written block [valid-token count, channel means,
                                    channel sums of squared deviations]; a NaN row = block not written

Chunking. A chunk is a few whole sequences along N (full L and d), at most ~256 KiB of embeddings or one
sequence (OWT: 1 sequence of 1 MiB; WMT L=128, d=512: 2). Training reads random whole sequences, so each
sequence costs one request for its chunk: a fixed ~1 ms of zarr 3.1 Python per request on the 2-core
test machine (benchmarks/bench_store.py), plus the chunk's bytes, of which only one sequence is used.
Capping chunks at 256 KiB keeps those wasted bytes (~0.1 ms at 2 GB/s) well below the fixed cost;
bigger chunks would only speed up the one-off write.

Sharding. Chunks are grouped into zarr v3 shards of about 256 MiB of embeddings (OWT: 256 sequences),
one file per shard and array: OWT would otherwise be ~35 M chunk files (9e9 tokens / 1024 per sequence x
4 arrays); sharded it is ~140 k. A shard is also the write unit ("block"), one atomic file write per
array (LocalStore writes a temp file and renames it). Readers fetch inner chunks by byte range with
concurrent slice reads (``read_indices``; zarr 3.1's orthogonal indexing decodes whole shards, ~10x
slower). The price: zarr 3.1 spends up to ~2x the Python time on a sharded read (it also fetches the
shard index; ~1.2 vs ~0.6 ms CPU per request measured). Where file count is no concern,
``sharded=False`` (``elf embed --no-sharding``) writes plain chunk files; a block then spans several
chunk files and stays the resume unit. Nothing is compressed: fp16 activations barely compress, token
arrays are <1% of the store (OWT: 50 GiB next to 8.4 TiB), and decompression would sit on the read path.

Resuming and scatter/gather. Blocks are written in index order; ``block_stats[k]`` is written after the
data of block k and marks it done. A rerun skips done blocks, and since each block is embedded on its own
(mini-batches aligned to the block start) a resumed or sharded write equals an uninterrupted one. Shard
job k of n writes the blocks with ``index % n == k`` of a store that any of them creates (atomically:
built in a temp dir and renamed). ``finalize_store`` checks every block is done, merges the per-block
statistics (so it never rereads the embeddings: 9 TB for OWT), hashes the token ids, counts each array's
data files and bytes, and writes the statistics, the checksum, the counts and the completion marker in
one attribute update. ``open_store`` verifies all of it before a store is read
(``elf.artifacts.check_store``; a finalize on a complete store without the counts records them).

Attributes: ``layout``, ``identity`` (embedding settings, encoder + tokenizer identity, source data
fingerprint; a rerun on a store made for other inputs is refused), ``code_version``, and once complete
``normalization_stats`` (scalar and per-channel mean/std over valid tokens, i.e. attention_mask == 1, of
the stored ``embeddings`` values; population std), ``token_ids_sha256``, ``data_files`` and
``complete: true``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import torch
import zarr
from tqdm import tqdm
from zarr.core.sync import sync as zarr_sync  # runs a coroutine on zarr's own event loop

from elf.artifacts import TOKEN_HASH_LIMIT, check_store, mismatch, short, store_files
from elf.artifacts.names import (STORE_COMPLETE, STORE_FILES, STORE_IDENTITY,
                                 STORE_IDENTITY_SHA256, STORE_LAYOUT, STORE_STATS, STORE_TOKEN_IDS_SHA256)
from elf.embed.arrays import (STORAGE_DTYPES, TOKEN_COLUMNS, TOKEN_DTYPES, StoreError, TokenArrays,
                              block_moments, from_storage, merge_moments, moments_to_stats, to_storage)
from elf.io import code_version, sha256_json

FORMAT_VERSION = 1
CHUNK_TARGET_BYTES = 256 << 10
BLOCK_TARGET_BYTES = 256 << 20


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------------------------------
# Layout
# ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StoreLayout:
    """Shapes, stored dtype and chunking of one store."""
    num_sequences: int
    seq_len: int
    dim: int
    dtype: str             # float16 | bfloat16 | float32 (EmbeddingSettings.dtype)
    conditional: bool      # adds embeddings_nosource
    chunk_sequences: int   # sequences per zarr chunk (inner chunk of a shard)
    block_sequences: int   # sequences per shard = write/resume unit; a multiple of chunk_sequences
    sharded: bool = True   # False: plain chunk files (cheaper reads, many more files)

    @property
    def num_blocks(self) -> int:
        return math.ceil(self.num_sequences / self.block_sequences)

    def block_range(self, block: int) -> tuple[int, int]:
        start = block * self.block_sequences
        return start, min(start + self.block_sequences, self.num_sequences)

    @property
    def sequence_bytes(self) -> int:
        """Bytes of one sequence's embeddings."""
        return self.seq_len * self.dim * (4 if self.dtype == "float32" else 2)

    @property
    def embedding_arrays(self) -> tuple[str, ...]:
        return ("embeddings", "embeddings_nosource") if self.conditional else ("embeddings",)

    def total_bytes(self) -> int:
        token_bytes = self.num_sequences * self.seq_len * (4 + 1 + 1)
        return token_bytes + len(self.embedding_arrays) * self.num_sequences * self.sequence_bytes

    def describe(self) -> str:
        """The size line printed before writing: N x L x d x bytes, human-readably."""
        emb = self.num_sequences * self.sequence_bytes
        parts = (f"{self.num_sequences:,} sequences x {self.seq_len} tokens x {self.dim} dims x "
                 f"{self.sequence_bytes // (self.seq_len * self.dim)} bytes ({self.dtype}) = {human_bytes(emb)}")
        if self.conditional:
            parts += ", x2 with embeddings_nosource"
        return (f"{parts}; {human_bytes(self.total_bytes())} with token arrays "
                f"({self.num_blocks} {'shards' if self.sharded else 'blocks'} of {self.block_sequences} "
                f"sequences, chunks of {self.chunk_sequences})")


def plan_layout(num_sequences: int, seq_len: int, dim: int, dtype: str, conditional: bool, *,
                chunk_sequences: int | None = None, block_sequences: int | None = None,
                sharded: bool = True) -> StoreLayout:
    """Choose chunk (<= 256 KiB or 1 sequence) and block (~256 MiB) sizes unless given; see the module
    docstring."""
    if dtype not in STORAGE_DTYPES:
        raise StoreError(f"embedding dtype {dtype!r} not one of {sorted(STORAGE_DTYPES)}")
    if num_sequences < 1:
        raise StoreError("no sequences to embed (the token split is empty)")
    seq_bytes = seq_len * dim * (4 if dtype == "float32" else 2)
    block = block_sequences or max(1, BLOCK_TARGET_BYTES // seq_bytes)
    chunk = min(chunk_sequences or max(1, CHUNK_TARGET_BYTES // seq_bytes), num_sequences)
    if chunk_sequences is None:
        chunk = math.gcd(chunk, block)  # inner chunks must tile a shard
    block = min(max(block, chunk), math.ceil(num_sequences / chunk) * chunk)
    if block % chunk:
        raise StoreError(f"block_sequences {block} must be a multiple of chunk_sequences {chunk}")
    return StoreLayout(num_sequences, seq_len, dim, dtype, conditional, chunk, block, sharded)


# ---------------------------------------------------------------------------------------------------
# Create / open
# ---------------------------------------------------------------------------------------------------

def _identity_hash(layout: StoreLayout, identity: Mapping) -> str:
    return sha256_json({"format": FORMAT_VERSION, "layout": dataclasses.asdict(layout), "identity": identity})


def _create_arrays(root: Path, layout: StoreLayout, attrs: dict) -> None:
    group = zarr.create_group(store=str(root), attributes=attrs)
    n, length, dim = layout.num_sequences, layout.seq_len, layout.dim
    c, b = layout.chunk_sequences, layout.block_sequences if layout.sharded else None
    for name in TOKEN_COLUMNS:
        group.create_array(name, shape=(n, length), dtype=TOKEN_DTYPES[name], compressors=None,
                           chunks=(c, length), shards=b and (b, length))
    for name in layout.embedding_arrays:
        group.create_array(name, shape=(n, length, dim), dtype=STORAGE_DTYPES[layout.dtype],
                           chunks=(c, length, dim), shards=b and (b, length, dim), compressors=None,
                           attributes={"dtype": layout.dtype,
                                       "encoding": "bfloat16 bit pattern in uint16"
                                       if layout.dtype == "bfloat16" else "native"})
    group.create_array("block_stats", shape=(layout.num_blocks, 1 + 2 * dim), dtype="float64",
                       chunks=(1, 1 + 2 * dim), fill_value=np.nan)


def create_store(path: str | os.PathLike, layout: StoreLayout, identity: Mapping,
                 extra_attrs: Mapping | None = None) -> zarr.Group:
    """Create the empty store, or reopen an existing one made for the same layout and identity.

    Creation is atomic (built in a temp dir, then renamed), so shard jobs may race to create it.
    """
    path = Path(path)
    expected = _identity_hash(layout, identity)
    if not (path / "zarr.json").exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        try:
            attrs = {"elf_store": FORMAT_VERSION, STORE_LAYOUT: dataclasses.asdict(layout),
                     STORE_IDENTITY: dict(identity), STORE_IDENTITY_SHA256: expected,
                     "code_version": code_version(), **(extra_attrs or {}), STORE_COMPLETE: False}
            _create_arrays(tmp, layout, attrs)
            try:
                os.rename(tmp, path)
            except OSError:
                if not (path / "zarr.json").exists():  # not a lost race: a real problem
                    raise StoreError(f"cannot create store at {path}: it exists and is not a store")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    group = zarr.open_group(str(path), mode="r+")
    found = group.attrs.get(STORE_IDENTITY_SHA256)
    if found != expected:
        raise StoreError(
            f"store {path} exists but was made for other inputs or settings (identity {found} != "
            f"{expected}); delete it to re-embed")
    return group


def _layout_of(group: zarr.Group, path: Path) -> StoreLayout:
    if STORE_LAYOUT not in group.attrs:
        raise StoreError(f"{path} is not an ELF embedding store (no {STORE_LAYOUT} attribute)")
    return StoreLayout(**group.attrs[STORE_LAYOUT])


class EmbeddingStore:
    """A complete store opened for reading (see ``open_store``)."""

    def __init__(self, group: zarr.Group, path: Path):
        self.group, self.path = group, path
        self.attrs = group.attrs.asdict()
        self.layout = _layout_of(group, path)
        self._arrays = {name: group[name] for name in (*TOKEN_COLUMNS, *self.layout.embedding_arrays)}

    num_sequences = property(lambda self: self.layout.num_sequences)
    seq_len = property(lambda self: self.layout.seq_len)
    dim = property(lambda self: self.layout.dim)
    dtype = property(lambda self: self.layout.dtype)
    conditional = property(lambda self: self.layout.conditional)
    stats = property(lambda self: self.attrs[STORE_STATS])
    identity = property(lambda self: self.attrs.get(STORE_IDENTITY) or {})
    identity_sha256 = property(lambda self: self.attrs.get(STORE_IDENTITY_SHA256))

    def __len__(self) -> int:
        return self.layout.num_sequences

    @property
    def array_names(self) -> tuple[str, ...]:
        return tuple(self._arrays)

    def read_rows(self, start: int, stop: int, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
        """Stored arrays for rows start..stop-1 (embeddings still in the stored dtype)."""
        names = self.array_names if names is None else names
        with self._readable(names):
            return {name: self._arrays[name][start:stop] for name in names}

    @contextlib.contextmanager
    def _readable(self, names):
        """A chunk zarr cannot decode (a crc32c mismatch, a short buffer: a file cut or damaged
        after finalize counted it) is a one-line ``StoreError``, not a codec traceback."""
        try:
            yield
        except (ValueError, RuntimeError, OSError, IndexError) as err:
            reason = (str(err).splitlines() or [type(err).__name__])[0][:160]
            raise StoreError(f"embedding store {self.path}: a chunk of array {', '.join(names)} cannot "
                             f"be read ({type(err).__name__}: {reason}); the file is damaged: re-embed "
                             f"it (delete {self.path} and rerun its embed rule)") from err

    def read_indices(self, indices: np.ndarray, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
        """Stored arrays for rows ``indices`` (in that order). The sorted rows are read as contiguous
        runs by slice, all runs of all arrays in one concurrent batch of zarr requests: zarr 3.1 spends
        ~1 ms of Python per request, so issuing them together is ~3x faster than one by one, and its
        orthogonal (fancy) indexing decodes whole shards (~10x slower)."""
        names = self.array_names if names is None else names
        indices = np.asarray(indices, dtype=np.int64)
        order = np.argsort(indices, kind="stable")
        ordered = indices[order]
        starts = np.flatnonzero(np.diff(ordered, prepend=ordered[0] - 2) != 1)
        runs = [(int(ordered[a]), int(ordered[b - 1]) + 1) for a, b in zip(starts, np.append(starts[1:], len(ordered)))]

        async def read_all():
            return await asyncio.gather(*(self._arrays[name].async_array.getitem(slice(a, b))
                                          for name in names for a, b in runs))

        with self._readable(names):
            parts = zarr_sync(read_all())
        out = {}
        for k, name in enumerate(names):
            gathered = np.concatenate(parts[k * len(runs):(k + 1) * len(runs)])
            out[name] = np.empty_like(gathered)
            out[name][order] = gathered
        return out


def open_store(path: str | os.PathLike) -> EmbeddingStore:
    """Open a complete store, verified (``elf.artifacts.check_store``: statistics, checksum and every
    array's data files as counted at finalize; the token-id checksum recomputed up to ``TOKEN_HASH_LIMIT`` bytes);
    refuse a missing, unfinished or damaged one with a message saying what to run."""
    path = Path(path)
    if not (path / "zarr.json").exists():
        raise StoreError(f"no embedding store at {path}: run the embed stage (`elf embed ... --out {path}`)")
    try:
        group = zarr.open_group(str(path), mode="r")
        complete = group.attrs.get(STORE_COMPLETE)
    except Exception as err:  # a damaged zarr.json: JSON, metadata or node errors
        raise StoreError(f"embedding store {path}: unreadable metadata ({type(err).__name__}: {err})") from err
    if not complete:
        raise StoreError(
            f"embedding store {path} is incomplete (no completion marker): rerun the embed stage "
            f"(`elf embed ... --out {path}`; it resumes), or `elf embed --finalize --out {path}` "
            f"once every --shard job has finished")
    check_store(path, group.attrs.asdict())
    try:
        store = EmbeddingStore(group, path)
    except (KeyError, TypeError, ValueError) as err:
        raise StoreError(f"embedding store {path}: an array is missing or unreadable ({err}); "
                         "re-embed it") from err
    layout = store.layout
    if layout.num_sequences * layout.seq_len * 4 <= TOKEN_HASH_LIMIT:
        with store._readable(("input_ids",)):
            found = _token_ids_sha256(group, layout, progress=False)
        recorded = store.attrs[STORE_TOKEN_IDS_SHA256]
        if found != recorded:
            raise mismatch(f"embedding store {path}: input_ids", short(found), short(recorded),
                           "the token ids are damaged; re-embed it")
    return store


# ---------------------------------------------------------------------------------------------------
# Write / finalize
# ---------------------------------------------------------------------------------------------------

def pending_blocks(group: zarr.Group) -> list[int]:
    """Indices of blocks not yet written (NaN row in block_stats)."""
    return np.flatnonzero(np.isnan(group["block_stats"][:, 0])).tolist()


@torch.no_grad()
def _embed_block(embedder: torch.nn.Module, cols: Mapping[str, np.ndarray], layout: StoreLayout,
                 batch_size: int, device: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Embed one block in mini-batches: stored arrays per embedding array + the block's moment row."""
    stored = {name: [] for name in layout.embedding_arrays}
    moments = []
    for lo in range(0, len(cols["input_ids"]), batch_size):
        batch = {c: torch.from_numpy(np.asarray(cols[c][lo:lo + batch_size], dtype=np.int64)).to(device)
                 for c in TOKEN_COLUMNS}
        for name in layout.embedding_arrays:
            drop = torch.full((batch["input_ids"].shape[0],), name == "embeddings_nosource",
                              dtype=torch.bool, device=device)
            x = embedder(batch["input_ids"], batch["attention_mask"], batch["cond_seq_mask"], drop)
            want = (*batch["input_ids"].shape, layout.dim)
            if tuple(x.shape) != want:
                raise StoreError(f"embedder returned shape {tuple(x.shape)}, expected {want}")
            stored[name].append(to_storage(x, layout.dtype))
            if name == "embeddings":  # statistics of the stored (rounded) values
                moments.append(block_moments(from_storage(stored[name][-1], layout.dtype),
                                             batch["attention_mask"].cpu() == 1))
    return {n: np.concatenate(v) for n, v in stored.items()}, merge_moments(np.stack(moments))


def write_blocks(path: str | os.PathLike, tokens: TokenArrays, embedder: torch.nn.Module, *,
                 batch_size: int = 64, device: str = "cpu", shard: int = 0, num_shards: int = 1,
                 after_block: Callable[[int], None] | None = None, progress: bool = True) -> int:
    """Embed and write this shard's pending blocks (``index % num_shards == shard``); returns how many.

    ``after_block(k)`` runs after block k is marked done (tests raise there to simulate a kill).
    """
    path = Path(path)
    group = zarr.open_group(str(path), mode="r+")
    layout = _layout_of(group, path)
    if len(tokens) != layout.num_sequences or tokens.seq_len != layout.seq_len:
        raise StoreError(f"token data ({len(tokens)} x {tokens.seq_len}) does not match store {path} "
                         f"({layout.num_sequences} x {layout.seq_len})")
    if not 0 <= shard < num_shards:
        raise StoreError(f"--shard {shard} must be in 0..{num_shards - 1}")
    todo = [k for k in pending_blocks(group) if k % num_shards == shard]
    embedder = embedder.to(device).eval()
    for block in tqdm(todo, desc=f"embed {path.name}", unit="block", disable=not progress):
        start, stop = layout.block_range(block)
        cols = tokens.rows(start, stop)
        embedded, moments = _embed_block(embedder, cols, layout, batch_size, device)
        for name in TOKEN_COLUMNS:
            group[name][start:stop] = cols[name].astype(TOKEN_DTYPES[name])
        for name, values in embedded.items():
            group[name][start:stop] = values
        group["block_stats"][block] = moments  # written last: marks the block done
        if after_block is not None:
            after_block(block)
    return len(todo)


def _token_ids_sha256(group: zarr.Group, layout: StoreLayout, progress: bool) -> str:
    """sha256 of the stored input_ids as little-endian int32, row-major."""
    digest = hashlib.sha256()
    ids = group["input_ids"]
    for block in tqdm(range(layout.num_blocks), desc="checksum token ids", unit="block", disable=not progress):
        start, stop = layout.block_range(block)
        digest.update(np.ascontiguousarray(ids[start:stop], dtype="<i4").tobytes())
    return digest.hexdigest()


def _missing_blocks_message(path: Path, missing: np.ndarray, num_blocks: int, num_shards: int | None) -> str:
    shown = ", ".join(map(str, missing[:10])) + (", ..." if missing.size > 10 else "")
    message = f"cannot finalize {path}: {missing.size} of {num_blocks} blocks not written (blocks {shown})"
    if num_shards:  # name the shard jobs that own them (job k writes blocks with index % n == k)
        shards = sorted({int(b) % num_shards for b in missing})
        return (f"{message}: shard job(s) {', '.join(map(str, shards))} of {num_shards} did not finish; "
                f"rerun `elf embed ... --shard k --num-shards {num_shards}` for each (they resume)")
    return (f"{message}; run the missing `elf embed --shard k --num-shards n` jobs, or rerun without "
            "--shard")


def finalize_store(path: str | os.PathLike, *, num_shards: int | None = None, progress: bool = True) -> dict:
    """Check every block is written, then write statistics, checksum and the completion marker.

    ``num_shards``: how many shard jobs wrote the store, so that a refusal names the unfinished ones.
    """
    path = Path(path)
    if not (path / "zarr.json").exists():
        raise StoreError(f"no embedding store at {path} to finalize: run `elf embed` (with --shard) first")
    group = zarr.open_group(str(path), mode="r+")
    layout = _layout_of(group, path)
    if group.attrs.get(STORE_COMPLETE):
        if STORE_FILES not in group.attrs:  # finalized before file records: record them as they are
            group.attrs.update({STORE_FILES: store_files(path)})
        return group.attrs[STORE_STATS]
    rows = group["block_stats"][:]
    missing = np.flatnonzero(np.isnan(rows[:, 0]))
    if missing.size:
        raise StoreError(_missing_blocks_message(path, missing, layout.num_blocks, num_shards))
    stats = moments_to_stats(merge_moments(rows))
    checksum = _token_ids_sha256(group, layout, progress)
    group.attrs.update({STORE_STATS: stats, STORE_TOKEN_IDS_SHA256: checksum,
                        STORE_FILES: store_files(path),
                        "finalized_code_version": code_version(), STORE_COMPLETE: True})
    return stats
