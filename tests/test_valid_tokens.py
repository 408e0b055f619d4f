"""Training tokens counted as the paper counts them: valid (non-pad) tokens from the train store's own
count, epochs over its rows, and the step budget the authors' code derives (⌊rows ÷ batch⌋ ×
epochs). A padded dataset in the authors' OWT layout (each row one record, padded with the pad id and
masked out) whose valid-token count is known goes through the real ``elf embed`` and ``elf train``;
T6, T7 and T8 are rendered from the run's config.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from elf.cli import main as elf_main
from elf.config import (BudgetSettings, DatasetSettings, EmbeddingSettings, ModelSettings, OptimSettings,
                        RunSettings, to_dict)
from elf.io import provenance, write_json
from elf.report import config_tables
from elf.report.cells import TableInputs
from elf.report.paper import load_paper_values
from elf.report.runs import (authors_steps, load_runs_meta, run_epochs, token_basis, token_slots,
                             trained_tokens)
from tests.test_audit import _encoder, _tokenizer

L, ROWS, BATCH, EPOCHS = 6, 16, 4, 5
PAPER_VALUES = Path(__file__).resolve().parents[1] / "config" / "paper_values.yaml"


def padded_tokens(out: Path, vocab: int) -> int:
    """ROWS rows of 2 … L real tokens, the rest pad id 0 with attention mask 0; returns the valid count."""
    import datasets

    rng = np.random.default_rng(0)
    lengths = rng.integers(2, L + 1, ROWS)
    ids = rng.integers(3, vocab, size=(ROWS, L)).astype(np.int32)
    mask = (np.arange(L)[None, :] < lengths[:, None]).astype(np.int8)
    ids[mask == 0] = 0
    columns = {"input_ids": ids, "attention_mask": mask, "cond_seq_mask": np.zeros((ROWS, L), np.int8),
               "source_length": np.zeros(ROWS, np.int32), "text": [""] * ROWS}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(columns)}).save_to_disk(str(out))
    write_json(out / "provenance.json", provenance(settings={"name": "toy"}, raw_root="corpora"))
    return int(lengths.sum())


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("valid-tokens")
    vocab = _tokenizer(str(root / "tok"))
    valid = padded_tokens(root / "tokens", vocab)
    _encoder(str(root / "enc"), vocab)
    embedding = EmbeddingSettings(kind="gaussian", normalization="scalar", dtype="float32")
    assert elf_main(["embed", "--settings", json.dumps(to_dict(embedding)), "--encoder", str(root / "enc"),
                     "--tokens", str(root / "tokens"), "--split", "train", "--out", str(root / "train.zarr"),
                     "--tokenizer", str(root / "tok")]) == 0
    steps = ROWS // BATCH * EPOCHS            # the paper's recipe: 5 epochs, as the authors derive it
    run = RunSettings(dataset="toy", embedding="gaussian", paper_run="R01",
                      model=ModelSettings(size="tiny", bottleneck=8), optim=OptimSettings(warmup_steps=2),
                      budget=BudgetSettings(batch_size=BATCH, steps=steps, log_every=steps))
    settings = {"run": to_dict(run), "embedding": to_dict(embedding),
                "dataset": to_dict(DatasetSettings(task="unconditional", source="embedded", name="toy",
                                                   max_length=L)),
                "sizes": {"tiny": {"depth": 1, "width": 16, "heads": 2}}}
    assert elf_main(["train", "--settings", json.dumps(settings), "--store", str(root / "train.zarr"),
                     "--tokenizer", str(root / "tok"), "--out", str(root / "runs" / "base"),
                     "--no-progress", "--device", "cpu"]) == 0
    return root, valid


def test_the_run_records_the_stores_rows_and_valid_count(run_dir):
    root, valid = run_dir
    config = json.loads((root / "runs" / "base" / "config.json").read_text())
    assert config["train_rows"] == ROWS and config["normalization_stats"]["count"] == valid
    assert valid < ROWS * L                                      # the dataset is padded
    assert run_epochs(config) == EPOCHS                          # steps × batch ÷ rows
    assert token_slots(config) == EPOCHS * ROWS * L              # what steps × batch × L would say
    assert trained_tokens(config) == pytest.approx(EPOCHS * valid) and token_basis(config) == "valid"
    assert authors_steps(config, EPOCHS) == ROWS // BATCH * EPOCHS == config["run"]["budget"]["steps"]


def test_t6_t7_t8_show_valid_tokens_and_five_epochs(run_dir):
    root, valid = run_dir
    meta = load_runs_meta(root / "runs", ["base"])
    paper_values = load_paper_values(PAPER_VALUES)
    inputs = TableInputs("T8", "t", None, None, None, paper_values, meta)
    t8 = config_tables.table_T8(inputs).to_markdown()
    row = next(line for line in t8.splitlines() if line.startswith("| ELF [base]"))
    assert f"| {EPOCHS * valid:,} |" in row and f"× {valid / (ROWS * L):.3f} valid" in row
    t7 = config_tables.table_T7(inputs).to_markdown()
    assert "| Optimisation | Epochs | 5 | 5 | yes |" in t7
    warmup = 2 / (ROWS // BATCH * EPOCHS) * EPOCHS
    assert f"| Optimisation | Warm-up (epochs) | 0.5 | {warmup:g} |" in t7
    assert f"| Budget | Steps (authors' code: ⌊rows ÷ batch⌋ × 5) | ~95K | {ROWS // BATCH * EPOCHS} |" in t7
    t6 = config_tables.table_T6(inputs).to_markdown()
    assert f"| {EPOCHS * valid:,} | 5.00 |" in t6


def test_r01s_recipe_reads_the_papers_45_2b_tokens_and_5_epochs():
    """R01's budget (95,000 steps × 512) over an OWT of 9.04B valid tokens in 9,728,000 rows of 1024:
    49.8B token slots, 45.2B valid tokens (the paper's Table 8), 5 epochs (Table 6/7)."""
    from elf.report import review

    config = {"model": {"max_length": 1024}, "train_rows": 9_728_000,
              "normalization_stats": {"count": 9.04e9},
              "run": {"kind": "train", "paper_run": "R01", "model": {"size": "ELF-B"},
                      "budget": {"steps": 95_000, "batch_size": 512}}}
    assert token_slots(config) == pytest.approx(49.8e9, rel=1e-3)
    assert trained_tokens(config) == pytest.approx(45.2e9) and run_epochs(config) == 5
    assert authors_steps(config, 5) == 95_000
    meta = {"R01": {"config": config, "config_path": "R01/config.json", "tokens": None}}
    checks = review.configuration_checks({"T8": meta}, load_paper_values(PAPER_VALUES))
    assert list(checks["same"]) == ["yes"] and list(checks["ours"]) == ["45.2"]
