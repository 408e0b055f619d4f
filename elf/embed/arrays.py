"""The rows and values an embedding store holds, apart from the store itself (``elf.embed.store``):
the token source (``TokenArrays``: one split of the packed tokens of elf/data), the stored embedding
dtype (``to_storage`` / ``from_storage``: bfloat16 kept as its uint16 bit pattern) and the mergeable
per-block statistics (``block_moments`` -> ``merge_moments`` -> ``moments_to_stats``).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np
import torch

from elf.artifacts import ArtifactError
from elf.artifacts.names import DATASETS_FINGERPRINT, TOKENS_SHA256

TOKEN_COLUMNS = ("input_ids", "attention_mask", "cond_seq_mask")
TOKEN_DTYPES = {"input_ids": "int32", "attention_mask": "int8", "cond_seq_mask": "int8"}
STORAGE_DTYPES = {"float16": "float16", "float32": "float32", "bfloat16": "uint16"}


class StoreError(ArtifactError):
    """A store that cannot be used as asked: missing, unfinished, or made for other inputs."""


# ---------------------------------------------------------------------------------------------------
# Token source (the packed-token split of elf/data)
# ---------------------------------------------------------------------------------------------------

class TokenArrays:
    """Row access to the token columns of one split: a ``datasets.Dataset`` or a dict of numpy arrays."""

    def __init__(self, columns: Any):
        missing = [c for c in TOKEN_COLUMNS if c not in getattr(columns, "column_names", columns)]
        if missing:
            raise StoreError(f"token data lacks columns {missing} (need {list(TOKEN_COLUMNS)})")
        self._dataset = None
        if hasattr(columns, "with_format"):  # datasets.Dataset: Arrow-backed, sliced lazily
            self._dataset = columns
            self._rows = columns.with_format("numpy", columns=list(TOKEN_COLUMNS))
            self._source_length = "source_length" in columns.column_names
        else:
            self._rows = {c: np.asarray(columns[c]) for c in TOKEN_COLUMNS}
            self._source_length = False
        first = self.rows(0, 1)["input_ids"] if len(self) else np.zeros((0, 0))
        self.seq_len = int(first.shape[1])

    @classmethod
    def from_disk(cls, directory: str | os.PathLike, split: str) -> "TokenArrays":
        """The ``split`` of a DatasetDict saved with ``save_to_disk`` at ``directory``."""
        import datasets  # heavy import, only where needed

        try:
            splits = datasets.load_from_disk(str(directory))
        except FileNotFoundError as err:
            raise StoreError(f"no saved token dataset at {directory}: {err}") from err
        if split not in splits:
            raise StoreError(f"token dataset {directory} has no split {split!r} (has {list(splits)})")
        return cls(splits[split])

    def __len__(self) -> int:
        return len(self._rows) if self._dataset is not None else len(self._rows["input_ids"])

    def rows(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Rows start..stop-1 as (n, L) arrays."""
        if self._dataset is not None:
            batch = self._rows[start:stop]
        else:
            batch = {c: a[start:stop] for c, a in self._rows.items()}
        return {c: np.asarray(batch[c]) for c in TOKEN_COLUMNS}

    def take(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Rows at ``indices``, in that order."""
        if self._dataset is not None:
            batch = self._rows[[int(i) for i in indices]]
        else:
            batch = {c: a[indices] for c, a in self._rows.items()}
        return {c: np.asarray(batch[c]) for c in TOKEN_COLUMNS}

    @property
    def conditional(self) -> bool:
        """Conditional data ([source ; target]) has source positions (cond_seq_mask == 1)."""
        if self._source_length:
            return bool(np.asarray(self._dataset.with_format("numpy")["source_length"]).max() > 0)
        if self._dataset is not None:
            return any(self.rows(s, min(s + 4096, len(self)))["cond_seq_mask"].any()
                       for s in range(0, len(self), 4096))
        return bool(self._rows["cond_seq_mask"].any())

    def fingerprint(self) -> dict:
        """Identity of the token data: the datasets fingerprint, or sha256 of the arrays."""
        if self._dataset is not None and getattr(self._dataset, "_fingerprint", None):
            return {DATASETS_FINGERPRINT: self._dataset._fingerprint, "num_rows": len(self)}
        digest = hashlib.sha256()
        for c in TOKEN_COLUMNS:
            digest.update(np.ascontiguousarray(self._rows[c], dtype=TOKEN_DTYPES[c]).tobytes())
        return {TOKENS_SHA256: digest.hexdigest(), "num_rows": len(self)}


# ---------------------------------------------------------------------------------------------------
# dtype conversion and mergeable statistics
# ---------------------------------------------------------------------------------------------------

def to_storage(x: torch.Tensor, dtype: str) -> np.ndarray:
    """float embeddings -> the stored numpy array (bfloat16 as its uint16 bit pattern)."""
    x = x.detach().to("cpu", torch.float32)
    if dtype == "bfloat16":
        return x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    return x.to(getattr(torch, dtype)).numpy()


def from_storage(stored: np.ndarray, dtype: str) -> torch.Tensor:
    """The stored array -> float32 torch tensor."""
    stored = np.ascontiguousarray(stored)
    if dtype == "bfloat16":
        return torch.from_numpy(stored.view(np.int16)).view(torch.bfloat16).float()
    return torch.from_numpy(stored).float()


def block_moments(emb: torch.Tensor, valid: torch.Tensor) -> np.ndarray:
    """[count, channel mean (d), channel sum of squared deviations (d)] over valid tokens, float64."""
    values = emb[valid.bool()].double()                       # (n, d)
    dim = emb.shape[-1]
    if values.shape[0] == 0:
        return np.concatenate([[0.0], np.zeros(2 * dim)])
    mean = values.mean(0)
    m2 = ((values - mean) ** 2).sum(0)
    return np.concatenate([[values.shape[0]], mean.numpy(), m2.numpy()])


def merge_moments(rows: np.ndarray) -> np.ndarray:
    """Combine per-part moment rows (k, 1+2d) into one row (Chan et al.'s parallel variance)."""
    rows = np.asarray(rows, dtype=np.float64).reshape(-1, rows.shape[-1])
    dim = (rows.shape[1] - 1) // 2
    counts, means, m2s = rows[:, 0], rows[:, 1:1 + dim], rows[:, 1 + dim:]
    total = counts.sum()
    if total == 0:
        return np.concatenate([[0.0], np.zeros(2 * dim)])
    mean = (counts[:, None] * means).sum(0) / total
    m2 = (m2s + counts[:, None] * (means - mean) ** 2).sum(0)
    return np.concatenate([[total], mean, m2])


def moments_to_stats(row: np.ndarray) -> dict:
    """Merged moment row -> scalar and per-channel mean/std (population std) over valid tokens."""
    dim = (len(row) - 1) // 2
    count, mean, m2 = row[0], row[1:1 + dim], row[1 + dim:]
    if count == 0:
        raise StoreError("no valid tokens (attention_mask == 1) to compute normalisation statistics")
    scalar_mean = mean.mean()  # every channel has the same count, so the scalar mean is their mean
    scalar_var = (m2.sum() + count * ((mean - scalar_mean) ** 2).sum()) / (count * dim)
    return {"count": int(count), "scalar_mean": float(scalar_mean), "scalar_std": float(np.sqrt(scalar_var)),
            "channel_mean": mean.tolist(), "channel_std": np.sqrt(m2 / count).tolist()}
