"""A small world of real artifacts for the bad-input table (tests/test_bad_inputs.py): two tokenizers,
packed conditional tokens, train/test embedding stores, an unconditional and a conditional
checkpoint, samples and a score file, all made by the real writers; and the ``elf`` command lines
that read them.

    world = build_world(root)       # once per module; each row copies it and damages the copy
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

from elf.artifacts import tokenizer_sha256
from elf.cli import main
from elf.config import (BudgetSettings, DatasetSettings, DistillSettings, EmbeddingSettings,
                        ModelSettings, RunSettings, to_dict)
from elf.embed import store as st
from elf.train.checkpoint import model_meta, save_final
from tests.helpers import TINY, tiny_model

L, D, VOCAB, SOURCE = TINY["max_length"], TINY["d"], TINY["vocab_size"], 6
SAMPLER = dict(method="sde", steps=2, gamma=1.0, sc_cfg=2.0)
DATASET = DatasetSettings(task="translation", source="embedded", name="wmt", max_length=L,
                          max_input_length=SOURCE)


class TableEmbedder(torch.nn.Module):
    """Embedder stand-in: a fixed random table (the store, not an encoder, is under test)."""
    cacheable = True
    dim = D

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(VOCAB, D, generator=torch.Generator().manual_seed(0)))

    def forward(self, input_ids, attention_mask, cond_seq_mask, drop_source):
        return self.table[input_ids] * attention_mask[..., None]


def build_tokenizer(path: Path, reverse: bool = False) -> None:
    """A word-level tokenizer over w3 … w31 (pad 0, EOS 1, unk 2); ``reverse`` permutes the ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    ids = list(range(3, VOCAB))[::-1] if reverse else list(range(3, VOCAB))
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{f"w{i}": j for i, j in zip(range(3, VOCAB), ids)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(path)


def packed_split(n: int, seed: int):
    """Conditional rows [source (6) ; target (6)] with their texts, as ``elf prepare`` lays them out."""
    import datasets

    rng = np.random.default_rng(seed)
    ids = rng.integers(3, VOCAB, size=(n, L))
    cond = (np.arange(L)[None, :] < SOURCE).repeat(n, 0).astype(np.int64)
    words = [" ".join(f"w{t}" for t in row) for row in ids]
    return datasets.Dataset.from_dict(dict(
        input_ids=ids.tolist(), attention_mask=np.ones((n, L), np.int64).tolist(),
        cond_seq_mask=cond.tolist(), source_length=[SOURCE] * n,
        source_text=[w.split(" ", SOURCE)[0] for w in words], reference=words))


def build_tokens(path: Path, tokenizer: Path, seed: int) -> None:
    import datasets

    datasets.DatasetDict(train=packed_split(8, seed), test=packed_split(6, seed + 1)).save_to_disk(path)
    (path / "provenance.json").write_text(json.dumps(
        {"tokenizer": str(tokenizer), "tokenizer_sha256": tokenizer_sha256(tokenizer)}))


def build_store(path: Path, tokens_dir: Path, split: str, tokenizer: Path) -> None:
    tokens = st.TokenArrays.from_disk(tokens_dir, split)
    layout = st.plan_layout(len(tokens), L, D, "float32", tokens.conditional, chunk_sequences=2,
                            block_sequences=2)
    identity = {"tokenizer": {"name_or_path": str(tokenizer), "tokenizer_sha256": tokenizer_sha256(tokenizer)},
                "source": {"tokens": str(tokens_dir), "split": split, **tokens.fingerprint()}}
    st.create_store(path, layout, identity)
    st.write_blocks(path, tokens, TableEmbedder(), progress=False)
    st.finalize_store(path, progress=False)


def build_checkpoint(path: Path, tokenizer: Path, dataset: DatasetSettings) -> None:
    model = tiny_model(0)
    with torch.no_grad():  # a non-zero denoise head, so samples are not all one token
        for p in model.final_layer.linear.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    meta = model_meta(model.cfg, run=to_dict(RunSettings(dataset=dataset.name)), dataset=to_dict(dataset),
                      embedding=to_dict(EmbeddingSettings()), tokenizer=str(tokenizer),
                      tokenizer_sha256=tokenizer_sha256(tokenizer))
    save_final(path, model.state_dict(), model.state_dict(), meta)


def build_world(root: Path) -> Path:
    build_tokenizer(root / "tok")
    build_tokenizer(root / "tok2", reverse=True)
    build_tokens(root / "tokens", root / "tok", seed=0)
    build_tokens(root / "other_tokens", root / "tok", seed=10)
    for split in ("train", "test"):
        build_store(root / f"{split}.zarr", root / "tokens", split, root / "tok")
    build_checkpoint(root / "run", root / "tok", DatasetSettings(task="unconditional", source="embedded",
                                                                  name="owt", max_length=L))
    build_checkpoint(root / "cond", root / "tok", DATASET)
    assert main(sample_args(root, root / "samples" / "seed0.jsonl")) == 0
    assert main(sample_args(root, root / "cond_samples" / "seed0.jsonl", conditional=True)) == 0
    assert main(score_args(root)) == 0
    return root


def copy_world(world: Path, to: Path) -> Path:
    """A private copy whose recorded paths (headers, store identities) point into the copy."""
    from elf.artifacts import write_checksums

    shutil.copytree(world, to)
    for path in to.rglob("*"):
        if path.suffix in (".jsonl", ".json") and path.is_file() and "zarr" not in str(path):
            path.write_text(path.read_text().replace(str(world), str(to)))
    for record in to.rglob("checksums.json"):  # a rewritten config.json is recorded as written
        write_checksums(record.parent, list(json.loads(record.read_text())))
    return to


# --------------------------------------------------------------------------------------------------
# Command lines
# --------------------------------------------------------------------------------------------------

def sample_args(root: Path, out: Path, *, conditional: bool = False, tokenizer: str = "tok",
                extra: tuple = ()) -> list[str]:
    args = ["sample", "--checkpoint", str(root / ("cond" if conditional else "run")), "--sampler",
            json.dumps(SAMPLER), "--sampler-name", "sde2", "--run-name", "cond" if conditional else "run",
            "--seed", "0", "--n", "6", "--batch-size", "3", "--tokenizer", str(root / tokenizer),
            "--out", str(out), "--no-progress"]
    if conditional:
        args += ["--store", str(root / "test.zarr"), "--tokens", str(root / "tokens")]
    return args + list(extra)


def score_args(root: Path, samples: str = "cond_samples/seed0.jsonl", task: str = "translation",
               extra: tuple = ()) -> list[str]:
    return ["score", "--samples", str(root / samples), "--task", task,
            "--out", str(root / "scores" / "seed0.json"), *extra]


def aggregate_args(root: Path, run: str = "cond") -> list[str]:
    return ["aggregate", "--scores", str(root / "scores" / "seed0.json"), "--run", run,
            "--sampler", "sde2", "--out", str(root / "aggregate.json")]


def train_settings(kind: str = "train") -> str:
    run = RunSettings(dataset="wmt", kind=kind, teacher="run" if kind == "distill" else None,
                      distill=DistillSettings(student_steps=2, teacher_substeps=2) if kind == "distill" else None,
                      released="./no/such/checkpoint_5" if kind == "released" else None,
                      model=ModelSettings(size="t", bottleneck=8),
                      budget=BudgetSettings(batch_size=4, steps=2, log_every=1, checkpoint_every=100))
    return json.dumps(dict(run=to_dict(run), dataset=to_dict(DATASET), embedding=to_dict(EmbeddingSettings()),
                           sizes={"t": {"depth": 1, "width": 32, "heads": 2}}))


def train_args(root: Path, tokenizer: str = "tok") -> list[str]:
    return ["train", "--settings", train_settings(), "--store", str(root / "train.zarr"),
            "--tokenizer", str(root / tokenizer), "--out", str(root / "runs" / "new"), "--no-progress"]


def distill_args(root: Path) -> list[str]:
    return ["distill", "--settings", train_settings("distill"), "--teacher", str(root / "cond"),
            "--init", str(root / "cond"), "--store", str(root / "train.zarr"), "--tokenizer",
            str(root / "tok"), "--out", str(root / "runs" / "pd"), "--no-progress"]
