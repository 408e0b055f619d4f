"""Raw loading: local files and embedded corpora in the real hub schemas, hub via a stand-in, errors."""

import json

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from elf.config import CorporaSettings, DatasetSettings
from elf.data import loaders
from elf.data.corpora import build_corpora
from elf.data.loaders import CarveSizes, DataError, load_raw, split_documents


def _settings(task, source, name, subset=None):
    return DatasetSettings(task=task, source=source, name=str(name), subset=subset)


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


WMT_ROWS = {split: [{"translation": {"de": f"{split} quelle {i}", "en": f"{split} target {i}"}}
                    for i in range(3)] for split in ("train", "validation", "test")}


# --------------------------------------------------------------------------------------------------
# Local files
# --------------------------------------------------------------------------------------------------

def test_local_jsonl_wmt_schema_per_split(tmp_path):
    for split, rows in WMT_ROWS.items():
        _write_jsonl(tmp_path / f"{split}.jsonl", rows)
    raw = load_raw(_settings("translation", "local", tmp_path, "de-en"))
    assert list(raw) == ["train", "validation", "test"]
    assert raw["validation"].column_names == ["source", "target"]
    assert raw["validation"][1] == {"source": "validation quelle 1", "target": "validation target 1"}
    swapped = load_raw(_settings("translation", "local", tmp_path, "en-de"))
    assert swapped["test"][0] == {"source": "test target 0", "target": "test quelle 0"}


@pytest.mark.parametrize("kind", ["jsonl", "parquet", "txt"])
def test_a_local_file_streamed_into_arrow_equals_the_one_read_in_memory(tmp_path, kind):
    """``cache_dir`` (elf prepare): the rows are written a block at a time to a memory-mapped Arrow
    file, the same rows as the in-memory read; the fingerprint follows the file's bytes."""
    texts = [f"document {i} with words" + " more" * (i % 7) for i in range(2500)]
    data = tmp_path / "data"
    data.mkdir()
    path = data / f"train.{kind}"
    if kind == "jsonl":
        _write_jsonl(path, [{"text": t} for t in texts])
    elif kind == "parquet":
        pq.write_table(pa.table({"text": texts}), path, row_group_size=300)  # several batches
    else:
        path.write_text("\n\n".join(texts) + "\n")
    carve = CarveSizes(10, 10, 10)
    in_memory = load_raw(_settings("unconditional", "local", data), carve=carve)
    streamed = load_raw(_settings("unconditional", "local", data), carve=carve, cache_dir=tmp_path / "cache")
    assert {s: streamed[s]["text"] for s in streamed} == {s: in_memory[s]["text"] for s in in_memory}
    assert (tmp_path / "cache" / "train.arrow").is_file()
    assert streamed["train"].cache_files  # memory-mapped, not held in memory
    again = load_raw(_settings("unconditional", "local", data), carve=carve, cache_dir=tmp_path / "cache")
    assert again["train"]._fingerprint == streamed["train"]._fingerprint
    if kind == "jsonl":
        _write_jsonl(path, [{"text": t.upper()} for t in texts])
        changed = load_raw(_settings("unconditional", "local", data), carve=carve, cache_dir=tmp_path / "cache")
        assert changed["train"]._fingerprint != streamed["train"]._fingerprint


def test_streamed_files_with_other_columns_are_refused_naming_the_file(tmp_path):
    folder = tmp_path / "train"
    folder.mkdir()
    _write_jsonl(folder / "a.jsonl", [{"text": "one"}])
    _write_jsonl(folder / "b.jsonl", [{"body": "two"}])
    with pytest.raises(DataError, match=r"b\.jsonl: columns \['body'\] differ"):
        load_raw(_settings("unconditional", "local", tmp_path), carve=CarveSizes(1, 1, 1),
                 cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*.tmp"))


def test_local_parquet_xsum_schema(tmp_path):
    for split in ("train", "validation", "test"):
        table = pa.table({"document": [f"{split} doc {i}" for i in range(4)],
                          "summary": [f"{split} sum {i}" for i in range(4)],
                          "id": [str(i) for i in range(4)]})
        pq.write_table(table, tmp_path / f"{split}.parquet")
    raw = load_raw(_settings("summarization", "local", tmp_path))
    assert raw["test"].column_names == ["source", "target"]
    assert raw["test"][3] == {"source": "test doc 3", "target": "test sum 3"}


def test_local_txt_folder_blocks_and_carving(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("doc 0 line 1\ndoc 0 line 2\n\n\ndoc 1\n\ndoc 2\n")
    (folder / "b.txt").write_text("doc 3\n\ndoc 4\n\ndoc 5\n\ndoc 6\n\n")
    (folder / "notes.md").write_text("ignored")
    raw = load_raw(_settings("unconditional", "local", folder), carve=CarveSizes(2, 1, 2))
    assert raw["train"]["text"] == ["doc 0 line 1\ndoc 0 line 2", "doc 1"]
    assert raw["heldout"]["text"] == ["doc 2", "doc 3"]
    assert raw["test"]["text"] == ["doc 4"]
    assert raw["validation"]["text"] == ["doc 5", "doc 6"]   # the last documents, as MDLM holds out


def test_local_single_jsonl_file_with_normalised_schema(tmp_path):
    path = tmp_path / "pairs.jsonl"
    _write_jsonl(path, [{"source": f"s{i}", "target": f"t{i}"} for i in range(6)])
    raw = load_raw(_settings("summarization", "local", path), carve=CarveSizes(1, 2, 5))
    assert list(raw) == ["train", "validation", "test"]  # no heldout for conditional data
    assert raw["train"]["source"] == ["s0", "s1", "s2"]
    assert raw["test"]["source"] == ["s3", "s4"]
    assert raw["validation"]["target"] == ["t5"]


def test_split_documents():
    assert split_documents("\n a \n b\n\n\n c \n") == ["a \n b", "c"]
    assert split_documents("\n\n") == []


# --------------------------------------------------------------------------------------------------
# Embedded corpora and the hub
# --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def embedded_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    settings = CorporaSettings(seed=2, train_docs=8, validation_docs=3, test_docs=2)
    for name, splits in build_corpora(settings).items():
        splits.save_to_disk(str(root / name))
    return root


def test_embedded_corpora_normalised(embedded_root):
    owt = load_raw(_settings("unconditional", "embedded", "owt"), embedded_root)
    assert {s: len(d) for s, d in owt.items()} == {"train": 8, "validation": 3, "test": 2,
                                                    "heldout": 3}
    wmt = load_raw(_settings("translation", "embedded", "wmt", "de-en"), embedded_root)
    original = datasets.load_from_disk(str(embedded_root / "wmt"))["test"][1]["translation"]
    assert wmt["test"][1] == {"source": original["de"], "target": original["en"]}
    xsum = load_raw(_settings("summarization", "embedded", "xsum"), embedded_root)
    original = datasets.load_from_disk(str(embedded_root / "xsum"))["train"][4]
    assert xsum["train"][4] == {"source": original["document"], "target": original["summary"]}
    with pytest.raises(DataError, match="corpora root"):
        load_raw(_settings("unconditional", "embedded", "owt"), None)
    with pytest.raises(DataError, match="elf corpora"):
        load_raw(_settings("unconditional", "embedded", "nope"), embedded_root)


def test_hub_openwebtext_is_carved_from_train(monkeypatch):
    calls = []

    def fake_load_dataset(*args):
        calls.append(args)
        return datasets.DatasetDict({"train": datasets.Dataset.from_dict(
            {"text": [f"web page {i}" for i in range(10)]})})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    raw = load_raw(_settings("unconditional", "hub", "Skylion007/openwebtext"),
                   carve=CarveSizes(validation=2, test=3, heldout=1))
    assert calls == [("Skylion007/openwebtext",)]
    assert raw["validation"]["text"] == ["web page 8", "web page 9"]
    assert raw["test"]["text"] == ["web page 5", "web page 6", "web page 7"]
    assert raw["heldout"]["text"] == ["web page 4"]
    assert raw["train"]["text"] == [f"web page {i}" for i in range(4)]


def test_hub_wmt_and_xsum_schemas(monkeypatch):
    wmt = datasets.DatasetDict({split: datasets.Dataset.from_dict(
        {"translation": [r["translation"] for r in rows]},
        features=datasets.Features({"translation": datasets.Translation(languages=["de", "en"])}))
        for split, rows in WMT_ROWS.items()})
    monkeypatch.setattr(datasets, "load_dataset", lambda *args: {("wmt14", "de-en"): wmt}[args])
    raw = load_raw(_settings("translation", "hub", "wmt14", "de-en"))
    assert raw["train"][2] == {"source": "train quelle 2", "target": "train target 2"}

    xsum = datasets.DatasetDict({split: datasets.Dataset.from_dict(
        {"document": ["d"], "summary": ["s"], "id": ["1"]}) for split in WMT_ROWS})
    monkeypatch.setattr(datasets, "load_dataset", lambda *args: xsum)
    raw = load_raw(_settings("summarization", "hub", "EdinburghNLP/xsum"))
    assert raw["validation"][0] == {"source": "d", "target": "s"}


# --------------------------------------------------------------------------------------------------
# Errors name the file and the column
# --------------------------------------------------------------------------------------------------

def test_missing_text_column_is_named(tmp_path):
    path = tmp_path / "docs.jsonl"
    _write_jsonl(path, [{"body": "x"}, {"body": "y"}])
    with pytest.raises(DataError, match=r"docs\.jsonl.*missing column 'text'.*body"):
        load_raw(_settings("unconditional", "local", path), carve=CarveSizes(0, 0, 0))


def test_wrong_conditional_schema_is_named(tmp_path):
    for split in ("train", "validation", "test"):
        _write_jsonl(tmp_path / f"{split}.jsonl", [{"article": "a", "highlights": "b"}])
    with pytest.raises(DataError, match=r"train\.jsonl.*'document' \+ 'summary'.*article, highlights"):
        load_raw(_settings("summarization", "local", tmp_path))


def test_translation_without_the_language_is_named(tmp_path):
    for split in ("train", "validation", "test"):
        _write_jsonl(tmp_path / f"{split}.jsonl", [{"translation": {"fr": "a", "en": "b"}}])
    with pytest.raises(DataError, match="column 'translation'.*'de'"):
        load_raw(_settings("translation", "local", tmp_path, "de-en"))


def test_non_text_column_is_named(tmp_path):
    pq.write_table(pa.table({"text": [1, 2, 3]}), tmp_path / "train.parquet")
    with pytest.raises(DataError, match="column 'text' must hold text"):
        loaders.load_raw(_settings("unconditional", "local", tmp_path / "train.parquet"),
                         carve=CarveSizes(1, 1, 0))


def test_too_small_to_carve_and_missing_path(tmp_path):
    path = tmp_path / "one.txt"
    path.write_text("only one document")
    with pytest.raises(DataError, match="cannot carve"):
        load_raw(_settings("unconditional", "local", path))
    with pytest.raises(DataError, match="does not exist"):
        load_raw(_settings("unconditional", "local", tmp_path / "absent"))


def test_unreadable_file_is_named(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"text": "ok"}\n{"text": \n')
    with pytest.raises(DataError, match="broken.jsonl"):
        load_raw(_settings("unconditional", "local", path))


def test_hub_revision_and_a_single_split_reach_load_dataset(monkeypatch):
    """A raw hub dataset pinned to a revision (XSum's parquet: refs/convert/parquet), and the one
    split an authors' dataset takes from it (its test split)."""
    from elf.config import RawDatasetSettings

    calls = []
    xsum = datasets.Dataset.from_dict({"document": ["d"], "summary": ["s"], "id": ["1"]})

    def fake_load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return xsum if kwargs.get("split") else datasets.DatasetDict({s: xsum for s in WMT_ROWS})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    settings = DatasetSettings(task="summarization", source="hub", name="EdinburghNLP/xsum",
                               revision="refs/convert/parquet", max_length=1088, max_input_length=1024)
    assert load_raw(settings)["test"][0] == {"source": "d", "target": "s"}
    assert calls[-1] == (("EdinburghNLP/xsum",), {"revision": "refs/convert/parquet"})
    wmt = datasets.Dataset.from_dict({"translation": [{"de": "quelle", "en": "target"}]})

    def fake_test_split(*args, **kwargs):
        calls.append((args, kwargs))
        return wmt

    monkeypatch.setattr(datasets, "load_dataset", fake_test_split)
    raw = RawDatasetSettings(name="wmt/wmt14", subset="de-en", revision="b199e40")
    assert loaders.load_raw_split(raw, "translation", "test")[0] == {"source": "quelle", "target": "target"}
    assert calls[-1] == (("wmt/wmt14", "de-en"), {"revision": "b199e40", "split": "test"})
