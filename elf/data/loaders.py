"""Raw text (or the authors' token ids) of one dataset, from any source, with normalised columns.

``load_raw(settings, embedded_root)`` returns a ``DatasetDict`` with splits ``train``, ``validation``,
``test`` (and ``heldout`` for unconditional data) whose columns are ``text`` (unconditional) or
``source`` and ``target`` (translation, summarisation), whatever the source:

- ``embedded``: ``load_from_disk(<embedded_root>/<name>)``, written by ``elf corpora``;
- ``hub``: ``datasets.load_dataset(name, subset, revision=revision)`` — OpenWebText (``text``), WMT14
  (``translation`` = {de, en}; the pair is ``subset``, e.g. "de-en", source first), XSum
  (``document`` -> source, ``summary`` -> target);
- ``authors``: the authors' tokenised sets (``elf.data.authors``): ``input_ids`` (unconditional) or
  ``condition_input_ids`` + ``input_ids`` beside the texts ``source`` and ``target``; the ``test``
  split, which their repos lack, from the raw dataset ``test`` (text columns as above), tokenised
  by ``elf prepare``;
- ``local``: a ``.txt`` / ``.jsonl`` / ``.parquet`` file or a folder of them, in either schema above.
  ``.txt`` holds unconditional text, one document per blank-line separated block (a file without
  blank lines is one document). A folder with files or sub-folders named after splits
  (``train.jsonl``, ``validation/``, ...) gives those splits; otherwise all its files form ``train``.
  A folder holding a saved ``DatasetDict`` is loaded as it is.

Missing splits are carved from the end of ``train`` (OpenWebText has only ``train`` on the hub):
``validation`` = its last documents, ``test`` the ones before, and for train-only unconditional data
``heldout`` the ones before those, sizes from ``CarveSizes``. Taking the tail in corpus order (no shuffle) follows
MDLM's OpenWebText convention (last documents held out), costs nothing on 8M documents and is
reproducible. A wrong schema raises ``DataError`` naming the file and the column.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pa_parquet

from elf.artifacts import file_sha256

SPLITS = ("train", "validation", "test")
HELDOUT = "heldout"
DATA_SUFFIXES = (".txt", ".jsonl", ".parquet")


class DataError(ValueError):
    """Raw data that cannot be used as asked: the message names the file or dataset and the column."""


@dataclass(frozen=True)
class CarveSizes:
    """Documents carved from the end of ``train`` for each missing split (heldout: unconditional)."""
    validation: int = 5000
    test: int = 5000
    heldout: int = 5000


def load_raw(settings, embedded_root: str | Path | None = None,
             carve: CarveSizes = CarveSizes(), num_proc: int = 1,
             cache_dir: str | Path | None = None) -> datasets.DatasetDict:
    """The dataset of a ``DatasetSettings`` with normalised columns and all splits.

    ``num_proc`` > 1 lets ``load_dataset`` download and convert a hub dataset in that many processes.
    ``cache_dir``: local files are streamed, a block at a time, into memory-mapped Arrow files
    there (``elf prepare``: memory independent of the file's size); None reads them into memory.
    """
    where = f"dataset '{settings.name}' ({settings.source})"
    origins: dict[str, str] = {}  # split -> the files it was read from (local), for error messages
    if settings.source == "embedded":
        if embedded_root is None:
            raise DataError(f"{where}: an embedded dataset needs the corpora root (--raw-root)")
        splits = _load_saved(Path(embedded_root) / settings.name)
    elif settings.source == "hub":
        splits = _load_hub(settings.name, settings.subset, settings.revision, num_proc)
    elif settings.source == "authors":
        return datasets.DatasetDict(_complete_splits(_load_authors(settings, num_proc), settings.task,
                                                     carve, where))
    else:
        splits = _load_local(Path(settings.name), origins, cache_dir)
    splits = {name: normalise(ds, settings.task, origins.get(name, f"{where} split '{name}'"),
                              settings.subset)
              for name, ds in splits.items()}
    return datasets.DatasetDict(_complete_splits(splits, settings.task, carve, where))


def _load_hub(name: str, subset: str | None, revision: str | None, num_proc: int = 1,
              split: str | None = None):
    """``datasets.load_dataset`` of a hub dataset (all splits, or one)."""
    args = (name, subset) if subset else (name,)
    kwargs = ({"num_proc": num_proc} if num_proc > 1 else {}) | \
        ({"revision": revision} if revision else {}) | ({"split": split} if split else {})
    loaded = datasets.load_dataset(*args, **kwargs)
    return loaded if split else dict(loaded)


def _load_authors(settings, num_proc: int = 1) -> dict[str, datasets.Dataset]:
    """The authors' splits (normalised) and the raw test split their repos lack."""
    from elf.data import authors

    splits = {}
    for split, ref in authors.split_refs(settings.name).items():
        where = f"authors' dataset {ref!r} (split {split!r})"
        try:
            splits[split] = authors.normalise(authors.read_split(ref, settings.revision, num_proc),
                                              settings.task, where)
        except authors.AuthorsDataError as err:
            raise DataError(str(err)) from err
    if settings.test is not None:
        splits["test"] = load_raw_split(settings.test, settings.task, "test", num_proc)
    return splits


def load_raw_split(raw, task: str, split: str, num_proc: int = 1) -> datasets.Dataset:
    """One split of a raw-text dataset (``RawDatasetSettings``), with normalised columns."""
    where = f"dataset '{raw.name}' ({raw.source}) split '{split}'"
    origins: dict[str, str] = {}
    if raw.source == "hub":
        data = _load_hub(raw.name, raw.subset, raw.revision, num_proc, split)
    else:
        found = _load_local(Path(raw.name), origins)
        if split not in found:
            raise DataError(f"{where}: no such split; found splits: {', '.join(found) or 'none'}")
        data = found[split]
    return normalise(data, task, origins.get(split, where), raw.subset)


# --------------------------------------------------------------------------------------------------
# Schemas
# --------------------------------------------------------------------------------------------------


def language_pair(subset: str | None) -> tuple[str, str]:
    """Source and target language of a ``translation`` column: "de-en" -> ("de", "en") (default)."""
    if not subset:
        return "de", "en"
    parts = subset.split("-")
    if len(parts) != 2 or not all(parts):
        raise DataError(f"subset '{subset}' is not a language pair like 'de-en'")
    return parts[0], parts[1]


def normalise(ds: datasets.Dataset, task: str, where: str,
              subset: str | None = None) -> datasets.Dataset:
    """Keep and rename the task's columns: ``text``, or ``source`` + ``target``."""
    columns = set(ds.column_names)
    if task == "unconditional":
        _require_string(ds, "text", where)
        return ds.select_columns(["text"])
    if {"source", "target"} <= columns:
        pass
    elif task == "translation" and "translation" in columns:
        src, tgt = language_pair(subset)
        ds = _flatten_translation(ds, src, tgt, where)
    elif task == "summarization" and {"document", "summary"} <= columns:
        ds = ds.rename_columns({"document": "source", "summary": "target"})
    else:
        expected = {"translation": "'translation' ({%s, %s}) or 'source' + 'target'"
                    % language_pair(subset),
                    "summarization": "'document' + 'summary' or 'source' + 'target'"}[task]
        raise DataError(f"{where}: {task} data needs column(s) {expected}; "
                        f"found columns: {', '.join(sorted(columns)) or 'none'}")
    for column in ("source", "target"):
        _require_string(ds, column, where)
    return ds.select_columns(["source", "target"])


def _flatten_translation(ds: datasets.Dataset, src: str, tgt: str, where: str) -> datasets.Dataset:
    feature = ds.features["translation"]
    languages = (list(feature.languages) if isinstance(feature, datasets.Translation)
                 else list(feature) if isinstance(feature, dict) else None)
    if languages is None or not {src, tgt} <= set(languages):
        raise DataError(f"{where}: column 'translation' must map languages '{src}' and '{tgt}' to "
                        f"text; it holds {languages if languages is not None else feature}")
    flat = ds.select_columns(["translation"]).flatten()
    return flat.rename_columns({f"translation.{src}": "source", f"translation.{tgt}": "target"})


def _require_string(ds: datasets.Dataset, column: str, where: str) -> None:
    if column not in ds.column_names:
        raise DataError(f"{where}: missing column '{column}'; found columns: "
                        f"{', '.join(ds.column_names) or 'none'}")
    feature = ds.features[column]
    if not (isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")):
        raise DataError(f"{where}: column '{column}' must hold text; it holds {feature}")


# --------------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------------


def _complete_splits(splits: dict[str, datasets.Dataset], task: str, carve: CarveSizes,
                     where: str) -> dict[str, datasets.Dataset]:
    """Keep train/validation/test(/heldout); carve the missing ones from the end of train.

    ``heldout`` is carved only from train-only data (hub OpenWebText); data that comes with its
    own validation and test keeps all of its train split.
    """
    if "train" not in splits:
        raise DataError(f"{where}: no 'train' split; found splits: {', '.join(splits) or 'none'}")
    train_only = set(splits) == {"train"}
    wanted = SPLITS + ((HELDOUT,) if task == "unconditional"
                       and (HELDOUT in splits or (train_only and carve.heldout > 0)) else ())
    missing = [s for s in ("validation", "test", HELDOUT) if s in wanted and s not in splits]
    train = splits["train"]
    end = len(train)
    carved = {}
    for split in missing:  # validation = the last documents, then test, then heldout before them
        size = getattr(carve, split)
        if size < 1 or size >= end:
            raise DataError(f"{where}: cannot carve the missing split(s) {', '.join(missing)} "
                            f"from 'train' ({len(train)} documents) with {carve}")
        carved[split] = train.select(range(end - size, end))
        end -= size
    result = {s: splits[s] for s in wanted if s in splits} | carved
    result["train"] = train.select(range(end)) if end < len(train) else train
    return {s: result[s] for s in wanted}


# --------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------


def _load_saved(path: Path) -> dict[str, datasets.Dataset]:
    if not (path / "dataset_dict.json").is_file():
        raise DataError(f"{path}: not a saved DatasetDict (no dataset_dict.json); "
                        "run `elf corpora` first or fix the path")
    return dict(datasets.load_from_disk(str(path)))


def _load_local(path: Path, origins: dict[str, str], cache_dir: str | Path | None = None
                ) -> dict[str, datasets.Dataset]:
    """Splits of a local file or folder; ``origins`` receives each split's file names; with
    ``cache_dir``, each split is streamed into a memory-mapped Arrow file there."""
    if not path.exists():
        raise DataError(f"local dataset '{path}' does not exist")
    if path.is_file():
        return {"train": _read_files([path], "train", origins, cache_dir)}
    if (path / "dataset_dict.json").is_file():
        return _load_saved(path)
    splits = {}
    for split in SPLITS + (HELDOUT,):
        files = [path / f"{split}{suffix}" for suffix in DATA_SUFFIXES]
        files = [f for f in files if f.is_file()] + _data_files(path / split)
        if files:
            splits[split] = _read_files(files, split, origins, cache_dir)
    if splits:
        return splits
    files = _data_files(path)
    if not files:
        raise DataError(f"local dataset '{path}' holds no {'/'.join(DATA_SUFFIXES)} files")
    return {"train": _read_files(files, "train", origins, cache_dir)}


def _data_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(f for f in folder.iterdir() if f.is_file() and f.suffix in DATA_SUFFIXES)


def _read_files(files: list[Path], split: str, origins: dict[str, str],
                cache_dir: str | Path | None = None) -> datasets.Dataset:
    names = ", ".join(str(f) for f in files[:3]) + (f" (+{len(files) - 3} more)" if len(files) > 3 else "")
    origins[split] = f"{names} (split '{split}')"
    suffixes = {f.suffix for f in files}
    if len(suffixes) > 1:
        raise DataError(f"mixed file types in one split: {', '.join(str(f) for f in files)}")
    if cache_dir is not None:
        return _stream_files(files, Path(cache_dir) / f"{split}.arrow")
    tables = [_read_table(f) for f in files]
    for f, table in zip(files[1:], tables[1:]):
        if table.schema.names != tables[0].schema.names:
            raise DataError(f"{f}: columns {table.schema.names} differ from {files[0]}'s "
                            f"{tables[0].schema.names}")
    return datasets.Dataset(pa.concat_tables(tables, promote_options="default"))


def _read_table(path: Path) -> pa.Table:
    try:
        if path.suffix == ".txt":
            return pa.table({"text": pa.array(split_documents(path.read_text()), pa.string())})
        if path.suffix == ".parquet":
            return pa_parquet.read_table(path)
        return pa_json.read_json(path)
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"{path}: cannot be read as {path.suffix[1:]}: {err}") from err


JSON_BLOCK = 16 << 20  # bytes parsed at a time; one JSON line must fit in a block


def _stream_files(files: list[Path], out: Path) -> datasets.Dataset:
    """The files' rows written a record batch at a time to the Arrow file ``out`` and memory-mapped
    from there. The fingerprint hashes the files' bytes (as the in-memory table's does its
    content), so the shards' identities, and with them resume, follow the data."""
    out.parent.mkdir(parents=True, exist_ok=True)
    digest, schema, writer = hashlib.sha256(), None, None
    tmp = out.with_name(out.name + ".tmp")
    try:
        with pa.OSFile(str(tmp), "wb") as sink:
            for path in files:
                for batch in _record_batches(path):
                    if schema is None:
                        schema = batch.schema
                        writer = pa.ipc.new_stream(sink, schema)
                    elif batch.schema.names != schema.names:
                        raise DataError(f"{path}: columns {batch.schema.names} differ from "
                                        f"{files[0]}'s {schema.names}")
                    writer.write_batch(batch if batch.schema == schema else _cast(batch, schema, path))
                digest.update(file_sha256(path).encode())
            if writer is None:  # no rows at all
                writer = pa.ipc.new_stream(sink, pa.schema([("text", pa.string())]))
            writer.close()
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    pa.default_memory_pool().release_unused()  # the parsed blocks: mimalloc keeps freed memory otherwise
    table = datasets.table.MemoryMappedTable.from_file(str(out))
    return datasets.Dataset(table, fingerprint=digest.hexdigest()[:16])


def _record_batches(path: Path):
    """A file's rows, a block at a time (plain text: its blank-line separated documents)."""
    try:
        if path.suffix == ".txt":
            yield from _text_batches(path)
        elif path.suffix == ".parquet":
            yield from pa_parquet.ParquetFile(path).iter_batches()
        else:
            reader = pa_json.open_json(path, read_options=pa_json.ReadOptions(block_size=JSON_BLOCK))
            while True:
                try:
                    yield reader.read_next_batch()
                except StopIteration:
                    return
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"{path}: cannot be read as {path.suffix[1:]}: {err}") from err


def _text_batches(path: Path, documents: int = 10_000):
    block: list[str] = []
    for document in iter_documents(path):
        block.append(document)
        if len(block) == documents:
            yield pa.record_batch({"text": pa.array(block, pa.string())})
            block = []
    if block:
        yield pa.record_batch({"text": pa.array(block, pa.string())})


def _cast(batch: pa.RecordBatch, schema: pa.Schema, path: Path) -> pa.RecordBatch:
    try:
        return batch.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise DataError(f"{path}: column types {batch.schema} differ from the first file's "
                        f"{schema}: {err}") from err


def split_documents(text: str) -> list[str]:
    """Blank-line separated blocks, stripped; empty blocks dropped."""
    return list(_documents(text.splitlines()))


def iter_documents(path: Path):
    """``split_documents`` of a file, read a line at a time."""
    with open(path, encoding="utf-8") as fh:
        yield from _documents(part for line in fh for part in line.splitlines() or [""])


def _documents(lines):
    current: list[str] = []
    for line in lines:
        if line.strip():
            current.append(line)
        elif current:
            yield "\n".join(current).strip()
            current = []
    if current:
        yield "\n".join(current).strip()
