"""The authors' tokenised datasets (``source: authors``), read the way their loader reads them.

Their sets on the Hub hold T5 token ids, one split per repo, written with ``save_to_disk``:
- ``embedded-language-flows/openwebtext-t5``: column ``input_ids``, one row of at most 1024 ids each
  (train only: the missing splits are carved from its end, as for raw OpenWebText);
- ``embedded-language-flows/wmt14_de-en_{train,validation}_t5`` and ``…/xsum_{train,validation}_t5``:
  ``condition_input_ids`` (source ids), ``input_ids`` (target ids), ``input`` / ``target`` (their
  texts; ``target`` is the reference), and ``index``, ``condition_sequence_length``,
  ``sequence_length``.
A dataset's ``name`` stands for its repos with ``{split}`` in place of train / validation; a local
folder (a ``save_to_disk`` copy, or files ``datasets.load_dataset`` reads, e.g. parquet) works the
same. ``read_split`` tries ``datasets.load_dataset`` and falls back to ``load_from_disk`` — after
``huggingface_hub.snapshot_download`` for a Hub id — as the authors' ``load_dataset_split`` does.

``normalise`` keeps ``input_ids`` (unconditional) or ``condition_input_ids``, ``input_ids``,
``source`` (from ``input``) and ``target`` (conditional). How rows are laid out from them is
``elf.data.pack`` (``pad_token_rows``; ``pack_token_pairs(..., append_eos=False)``).
"""

from __future__ import annotations

from pathlib import Path

import datasets

ID_COLUMNS = {"unconditional": ("input_ids",), "conditional": ("condition_input_ids", "input_ids")}
TEXT_COLUMNS = {"input": "source", "target": "target"}  # the authors' text columns -> ours
SPLIT_FIELD = "{split}"


class AuthorsDataError(ValueError):
    """An authors' dataset that cannot be read or lacks a column; the message names it."""


def split_refs(name: str) -> dict[str, str]:
    """The repo id or folder of each split a ``name`` stands for (train, and validation if it has
    ``{split}``)."""
    if SPLIT_FIELD not in name:
        return {"train": name}
    return {split: name.replace(SPLIT_FIELD, split) for split in ("train", "validation")}


def read_split(ref: str, revision: str | None = None, num_proc: int = 1) -> datasets.Dataset:
    """The one split stored at ``ref`` (Hub id or local folder)."""
    local = Path(ref).exists()
    errors = []
    try:
        kwargs = {"num_proc": num_proc} if num_proc > 1 else {}
        loaded = datasets.load_dataset(ref, **kwargs, **({} if local else {"revision": revision}))
        if not _is_saved_folder_listing(loaded):
            return _single_split(loaded, ref)
    except Exception as err:  # the Hub's and datasets' errors have many types; the fallback decides
        errors.append(f"load_dataset: {str(err).splitlines()[0] if str(err) else type(err).__name__}")
    folder = ref if local else _snapshot(ref, revision, errors)
    try:
        return _single_split(datasets.load_from_disk(folder), ref)
    except (FileNotFoundError, ValueError) as err:
        errors.append(f"load_from_disk({folder}): {err}")
    raise AuthorsDataError(f"authors' dataset {ref!r}" + (f" (revision {revision})" if revision else "")
                           + f" could not be read: {'; '.join(errors)}")


def _snapshot(ref: str, revision: str | None, errors: list[str]) -> str:
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo_id=ref, repo_type="dataset", revision=revision)
    except Exception as err:  # offline, not found, gated: one message naming the repo
        errors.append(f"snapshot_download: {err}")
        raise AuthorsDataError(f"authors' dataset {ref!r} could not be read: "
                               f"{'; '.join(errors)}") from err


def _is_saved_folder_listing(loaded) -> bool:
    """``load_dataset`` on a ``save_to_disk`` folder may read its JSON files as rows: every column
    is a private field such as ``_data_files`` (the case the authors' loader also catches)."""
    parts = loaded.values() if isinstance(loaded, datasets.DatasetDict) else [loaded]
    return all(ds.column_names and all(c.startswith("_") for c in ds.column_names) for ds in parts)


def _single_split(loaded, ref: str) -> datasets.Dataset:
    if isinstance(loaded, datasets.DatasetDict):
        if len(loaded) != 1:
            raise AuthorsDataError(f"authors' dataset {ref!r} holds splits {', '.join(loaded)}; "
                                   "expected one split per repo or folder")
        return next(iter(loaded.values()))
    return loaded


def normalise(ds: datasets.Dataset, task: str, where: str) -> datasets.Dataset:
    """Check the authors' columns and keep what the layout and the references need."""
    kind = "unconditional" if task == "unconditional" else "conditional"
    for column in ID_COLUMNS[kind]:
        feature = ds.features.get(column)
        if not (isinstance(feature, (datasets.List, datasets.LargeList, list))
                and getattr(feature, "feature", None) is not None
                and str(feature.feature.dtype).startswith(("int", "uint"))):
            raise AuthorsDataError(f"{where}: column {column!r} must hold lists of token ids; "
                                   f"{'it holds ' + str(feature) if feature else 'it is missing'} "
                                   f"(columns: {', '.join(ds.column_names)})")
    if kind == "unconditional":
        return ds.select_columns(["input_ids"])
    for column in TEXT_COLUMNS:
        if column not in ds.column_names:
            raise AuthorsDataError(f"{where}: missing text column {column!r} (the source / reference "
                                   f"text); columns: {', '.join(ds.column_names)}")
    ds = ds.select_columns([*ID_COLUMNS[kind], *TEXT_COLUMNS]).rename_columns({"input": "source"})
    return ds


def check_ids(rows, vocab_size: int, where: str) -> None:
    """Refuse ids the tokenizer does not have: the set was tokenised with another tokenizer."""
    top = max((max(row) for row in rows if len(row)), default=-1)
    if top >= vocab_size:
        raise AuthorsDataError(f"{where}: token id {top} is beyond the tokenizer's {vocab_size} ids; "
                               "these ids come from another tokenizer")
