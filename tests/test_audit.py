"""``elf audit`` and the provenance chain (elf/audit/, elf/stages/audit.py).

A miniature chain is built once per module by the real stages on tiny inputs — a trained tokenizer,
a packed-token split, a Gaussian-table store (``elf embed``), a 2-step run (``elf train``), two seeds
of samples (``elf sample``), score files in ``elf score``'s format (its scorer would need a GPT-2),
``elf aggregate`` and a figure sidecar (``write_sidecar``) — with relative recorded paths, as the
default config writes them. Each test audits a fresh copy (``--root`` points at it), so breaking a
link in one test leaves the others intact.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from elf.cli import main as elf_main
from elf.config import (BudgetSettings, DatasetSettings, EmbeddingSettings, ModelSettings, OptimSettings,
                        RunSettings, SamplerSettings, to_dict)
from elf import audit as pv
from elf.io import provenance, sha256_json, write_json
from elf.artifacts import file_sha256, read_json

V = 48          # tokenizer vocabulary
L = 6           # sequence length
SEEDS = (0, 1)
SAMPLER = SamplerSettings(method="sde", steps=2, gamma=1.0, sc_cfg=2.0)
FIGURE = "reports/figures/F9.png"
CHAIN_KINDS = ("figure", "aggregate", "scores", "samples", "checkpoint", "run config", "embedding store",
               "dataset")


def _stage(*argv: str) -> None:
    assert elf_main(list(argv)) == 0, argv


def _tokenizer(out: str) -> int:
    from elf.data.tokenizer import train_tokenizer

    words = ["fox", "dog", "jumps", "over", "the", "lazy", "quick", "brown", "cat", "runs"]
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, size=8)) for _ in range(50)]
    tokenizer = train_tokenizer(texts, V)
    tokenizer.save_pretrained(out)
    return len(tokenizer)


def _tokens(out: str, vocab: int) -> None:
    import datasets

    rng = np.random.default_rng(0)
    n = 12
    ids = rng.integers(3, vocab, size=(n, L)).astype(np.int32)
    columns = {"input_ids": ids, "attention_mask": np.ones((n, L), np.int8),
               "cond_seq_mask": np.zeros((n, L), np.int8), "source_length": np.zeros(n, np.int32),
               "text": [""] * n}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(columns)}).save_to_disk(out)
    write_json(Path(out) / "provenance.json", provenance(settings={"name": "toy"}, raw_root="corpora"))


def _encoder(out: str, vocab: int) -> None:
    """A saved T5 config (the Gaussian kind takes its width) and a weights file to be hashed."""
    import torch
    from safetensors.torch import save_file
    from transformers import T5Config

    T5Config(vocab_size=vocab, d_model=8, d_kv=4, d_ff=16, num_layers=1, num_heads=2).save_pretrained(out)
    save_file({"shared.weight": torch.zeros(vocab, 8)}, str(Path(out) / "model.safetensors"))


def _score_file(samples: str, out: str, seed: int) -> None:
    """A score file as `elf score` writes it (made-up metric values; the scorer folder is hashed)."""
    from elf.artifacts.records import read_samples
    from elf.artifacts.records import scorer_fingerprint

    header, rows = read_samples(samples)
    record = provenance(samples=samples, samples_sha256=file_sha256(samples), task="unconditional",
                        metrics_settings={}, scorer="results/models/scorer",
                        **scorer_fingerprint("results/models/scorer", None))
    metrics = {"gen_ppl": 100.0 + 10 * seed, "entropy": 4.0 + seed / 8, "n_samples": len(rows)}
    write_json(out, {"provenance": record, "samples_provenance": header, "metrics": metrics})


def train_settings(embedding: EmbeddingSettings) -> dict:
    run = RunSettings(dataset="toy", embedding="gaussian", model=ModelSettings(size="tiny", bottleneck=8),
                      optim=OptimSettings(blr=0.01),
                      budget=BudgetSettings(batch_size=4, steps=2, log_every=1))
    return {"run": to_dict(run), "embedding": to_dict(embedding),
            "dataset": to_dict(DatasetSettings(task="unconditional", source="embedded", name="toy",
                                               max_length=L)),
            "sizes": {"tiny": {"depth": 1, "width": 16, "heads": 2}}}


def build_chain() -> None:
    """Every link from the packed tokens to a figure sidecar, in the current directory."""
    vocab = _tokenizer("results/models/tokenizer")
    _tokens("results/data/toy/tokens", vocab)
    _encoder("results/models/encoder-main", vocab)
    embedding = EmbeddingSettings(kind="gaussian", normalization="scalar", dtype="float16")
    store = "results/embeddings/toy/gaussian/train.zarr"
    _stage("embed", "--settings", json.dumps(to_dict(embedding)), "--encoder", "results/models/encoder-main",
           "--tokens", "results/data/toy/tokens", "--split", "train", "--out", store,
           "--tokenizer", "results/models/tokenizer")
    _stage("train", "--settings", json.dumps(train_settings(embedding)), "--store", store, "--tokenizer",
           "results/models/tokenizer", "--out", "results/runs/base", "--no-progress")
    Path("results/models/scorer").mkdir(parents=True)
    Path("results/models/scorer/model.safetensors").write_bytes(b"stand-in scorer weights")
    scores = []
    for seed in SEEDS:
        samples = f"results/samples/base/sde8/seed{seed}.jsonl"
        _stage("sample", "--checkpoint", "results/runs/base", "--sampler", json.dumps(to_dict(SAMPLER)),
               "--sampler-name", "sde8", "--run-name", "base", "--seed", str(seed), "--n", "2",
               "--tokenizer", "results/models/tokenizer", "--out", samples, "--no-progress")
        scores.append(f"results/scores/base/sde8/seed{seed}.json")
        _score_file(samples, scores[-1], seed)
    aggregate = "results/aggregates/base/sde8.json"
    _stage("aggregate", "--scores", *scores, "--run", "base", "--sampler", "sde8", "--out", aggregate)
    _figure(aggregate)


def _figure(aggregate: str) -> None:
    from elf.report.manifest import write_sidecar

    Path(FIGURE).parent.mkdir(parents=True)
    Path(FIGURE).write_bytes(b"\x89PNG stand-in figure")
    Path("config").mkdir()
    Path("config/paper_values.yaml").write_text("F9: {}\n")
    frame = pd.DataFrame([{"run": "base", "sampler": "sde8", "aggregate_path": aggregate,
                           "aggregate_sha256": file_sha256(aggregate)}])
    write_sidecar("reports", "F9", "figure", "Gen. PPL of the toy run", [Path(FIGURE)], frame, {},
                  "config/paper_values.yaml")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    base = tmp_path_factory.mktemp("chain")
    cwd = os.getcwd()
    os.chdir(base)
    try:
        build_chain()
    finally:
        os.chdir(cwd)
    return base


@pytest.fixture
def chain_dir(pristine, tmp_path):
    """A private copy of the chain (recorded paths are relative, so the copy is self-contained)."""
    return Path(shutil.copytree(pristine, tmp_path / "copy"))


def audit_cli(capsys, root: Path, *argv: str) -> tuple[int, str, str]:
    code = elf_main(["audit", str(root / argv[0]), *argv[1:], "--root", str(root)])
    out = capsys.readouterr()
    return code, out.out, out.err


def tree_row(line: str) -> tuple[str, str, str, str]:
    """(kind, path, shown sha256, status) of one line of the printed tree."""
    kind, path, sha, status = line.lstrip("│├└─ ").split("  ")[:4]
    return kind, path, sha.removeprefix("sha256 "), status


def kinds_and_paths(chain: pv.Link) -> set[tuple[str, str]]:
    return {(link.kind, link.path) for link in chain.walk()}


# --------------------------------------------------------------------------------------------------
# A complete chain
# --------------------------------------------------------------------------------------------------

def test_complete_chain_reaches_every_link(chain_dir):
    chain = pv.audit(chain_dir / FIGURE, root=chain_dir)
    assert chain.complete, [(l.kind, l.path, l.problems) for l in chain.broken()]
    found = kinds_and_paths(chain)
    expected = {("figure", FIGURE), ("aggregate", "results/aggregates/base/sde8.json"),
                ("checkpoint", "results/runs/base/ema.safetensors"),
                ("run config", "results/runs/base/config.json"),
                ("embedding store", "results/embeddings/toy/gaussian/train.zarr"),
                ("dataset", "results/data/toy/tokens"),
                ("tokenizer", "results/models/tokenizer/tokenizer.json"),
                ("encoder", "results/models/encoder-main/model.safetensors"),
                ("scorer", "results/models/scorer"), ("paper values", "config/paper_values.yaml")}
    for seed in SEEDS:
        expected |= {("scores", f"results/scores/base/sde8/seed{seed}.json"),
                     ("samples", f"results/samples/base/sde8/seed{seed}.jsonl")}
    assert {(kind, str(chain_dir / path)) for kind, path in expected} <= found
    # each link's hash is what is on disk now, and what its parent recorded
    samples = next(l for l in chain.walk() if l.kind == "samples")
    checkpoint = samples.children[0]
    weights = chain_dir / "results/runs/base/ema.safetensors"
    assert checkpoint.sha256 == checkpoint.recorded == file_sha256(weights)
    run_config = checkpoint.children[0]
    meta = read_json(chain_dir / "results/runs/base/config.json")
    assert run_config.sha256 == run_config.recorded == sha256_json(meta["run"])
    assert samples.info["sampler_settings"] == to_dict(SAMPLER) and samples.info["code_version"]
    store = run_config.children[0]
    assert store.sha256 is not None and store.children[0].kind == "dataset"


def test_samples_header_records_the_run_config_hash(pristine):
    header = json.loads((pristine / "results/samples/base/sde8/seed0.jsonl").read_text().splitlines()[0])
    meta = read_json(pristine / "results/runs/base/config.json")
    assert header["provenance"]["run_config_sha256"] == sha256_json(meta["run"])


def test_cli_prints_every_link_and_exits_zero(chain_dir, capsys):
    code, out, err = audit_cli(capsys, chain_dir, FIGURE)
    assert code == 0, err
    rows = [tree_row(line) for line in out.splitlines() if "  sha256 " in line]
    assert {kind for kind, _, _, _ in rows} >= set(CHAIN_KINDS)
    assert all(status == "ok" for _, _, _, status in rows)
    ema = file_sha256(chain_dir / "results/runs/base/ema.safetensors")
    assert f"{chain_dir}/results/runs/base/ema.safetensors  sha256 {ema[:16]}…  ok" in out
    assert "(verified; expanded above)" in out  # the second seed's checkpoint
    assert "chain complete" in out


def test_cell_follows_one_number(chain_dir, capsys):
    chain = pv.audit(chain_dir / FIGURE, "base/sde8/gen_ppl/seed1", root=chain_dir)
    aggregate = chain.children[0]
    assert aggregate.info["gen_ppl"] == {"mean": 105.0, "se": 5.0, "n": 2}  # (100, 110): std 7.07/sqrt 2
    assert [s.info["seed"] for s in aggregate.children] == [1]
    assert aggregate.children[0].info["gen_ppl"] == 110.0
    assert not any(link.repeated for link in chain.walk())  # seed 0's branch is not walked at all
    assert all(link.kind != "paper values" for link in chain.walk())
    code, out, _ = audit_cli(capsys, chain_dir, FIGURE, "gen_ppl")
    assert code == 0 and "gen_ppl=105 ± 5 (n=2)" in out and "gen_ppl=100" in out


def test_unknown_cell_part_is_refused(chain_dir, capsys):
    code, _, err = audit_cli(capsys, chain_dir, FIGURE, "base/ode64")
    assert code == 2 and "'ode64'" in err and "sde8" in err


def test_chain_from_a_samples_file_and_json_output(chain_dir, capsys):
    code, out, _ = audit_cli(capsys, chain_dir, "results/samples/base/sde8/seed1.jsonl", "--json")
    assert code == 0
    record = json.loads(out)
    assert record["complete"] and record["chain"]["kind"] == "samples"
    checkpoint = record["chain"]["children"][0]
    assert checkpoint["kind"] == "checkpoint" and len(checkpoint["sha256"]) == 64
    assert checkpoint["children"][0]["children"][0]["kind"] == "embedding store"


# --------------------------------------------------------------------------------------------------
# Broken chains
# --------------------------------------------------------------------------------------------------

def test_deleted_checkpoint_fails_naming_it(chain_dir, capsys):
    shutil.rmtree(chain_dir / "results/runs/base")
    code, out, err = audit_cli(capsys, chain_dir, FIGURE)
    assert code == 2
    weights = f"{chain_dir}/results/runs/base/ema.safetensors"
    assert f"checkpoint {weights}: MISSING" in err and "is gone" in err
    assert f"checkpoint  {weights}  sha256 -  MISSING" in out


def test_modified_samples_file_fails_naming_it(chain_dir, capsys):
    samples = chain_dir / "results/samples/base/sde8/seed1.jsonl"
    with open(samples, "a") as fh:
        fh.write(json.dumps({"i": 99, "text": "added later", "token_ids": []}) + "\n")
    chain = pv.audit(chain_dir / FIGURE, root=chain_dir)
    assert [(l.kind, l.path, l.status) for l in chain.broken()] == [("samples", str(samples), pv.CHANGED)]
    code, _, err = audit_cli(capsys, chain_dir, FIGURE)
    assert code == 2 and f"samples {samples}: HASH CHANGED" in err
    code, _, _ = audit_cli(capsys, chain_dir, FIGURE, "seed0")  # the other seed's chain is intact
    assert code == 0


def test_changed_run_config_fails(chain_dir):
    path = chain_dir / "results/runs/base/config.json"
    meta = read_json(path)
    meta["run"]["budget"]["steps"] = 999
    path.write_text(json.dumps(meta))
    broken = pv.audit(chain_dir / FIGURE, root=chain_dir).broken()
    assert [(l.kind, l.status) for l in broken] == [("run config", pv.CHANGED)]


def test_re_prepared_dataset_fails_at_the_end_of_the_chain(chain_dir):
    tokens = chain_dir / "results/data/toy/tokens"
    shutil.rmtree(tokens)
    _tokens(str(tokens), V - 1)  # other token ids: another fingerprint
    broken = pv.audit(chain_dir / FIGURE, root=chain_dir).broken()
    assert [(l.kind, l.path, l.status) for l in broken] == [("dataset", str(tokens), pv.CHANGED)]


def test_re_embedded_store_fails(chain_dir):
    import zarr

    group = zarr.open_group(str(chain_dir / "results/embeddings/toy/gaussian/train.zarr"), mode="r+")
    stats = dict(group.attrs["normalization_stats"], scalar_std=1.0)
    group.attrs.update({"normalization_stats": stats})
    broken = pv.audit(chain_dir / FIGURE, root=chain_dir).broken()
    assert [(l.kind, l.status) for l in broken] == [("embedding store", pv.CHANGED)]


def test_a_damaged_chunk_file_is_refused_by_the_audit_and_by_training(chain_dir, capsys):
    """One verifier for a store (elf.artifacts.store_problems): what `elf train` refuses, the audit
    reports, with the same words."""
    store = chain_dir / "results/embeddings/toy/gaussian/train.zarr"
    chunk = max((p for p in store.rglob("*") if p.is_file() and p.name != "zarr.json"),
                key=lambda p: p.stat().st_size)
    chunk.write_bytes(chunk.read_bytes()[:-1])
    broken = pv.audit(chain_dir / FIGURE, root=chain_dir).broken()
    assert [(l.kind, l.status) for l in broken] == [("embedding store", pv.BROKEN)]
    assert "a chunk file is missing or truncated" in " ".join(broken[0].problems)
    embedding = EmbeddingSettings(kind="gaussian", normalization="scalar", dtype="float16")
    args = ["train", "--settings", json.dumps(train_settings(embedding)),
            "--store", str(store), "--tokenizer", str(chain_dir / "results/models/tokenizer"),
            "--out", str(chain_dir / "results/runs/again"), "--no-progress"]
    capsys.readouterr()
    assert elf_main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a chunk file is missing or truncated" in err
    assert not (chain_dir / "results/runs/again").exists()


def test_store_identity_other_than_the_checkpoint_recorded_fails(chain_dir):
    path = chain_dir / "results/runs/base/config.json"
    meta = read_json(path)
    meta["store_identity"] = "0" * 64  # the run config hash covers meta["run"] only
    path.write_text(json.dumps(meta))
    broken = pv.audit(chain_dir / FIGURE, root=chain_dir).broken()
    assert [(l.kind, l.status, l.recorded) for l in broken] == [("embedding store", pv.CHANGED, "0" * 64)]


def test_run_embedded_on_the_fly_is_traced_to_its_tokens(chain_dir):
    from elf.embed.store import TokenArrays

    path = chain_dir / "results/runs/base/config.json"
    meta = read_json(path)
    meta.update(store=None, store_identity=None, tokens="results/data/toy/tokens")
    path.write_text(json.dumps(meta))
    broken = pv.audit(chain_dir / FIGURE, root=chain_dir).broken()
    assert [(l.kind, l.status) for l in broken] == [("dataset", pv.NOT_RECORDED)]
    meta["tokens_fingerprint"] = TokenArrays.from_disk(chain_dir / meta["tokens"], "train").fingerprint()
    path.write_text(json.dumps(meta))
    assert pv.audit(chain_dir / FIGURE, root=chain_dir).complete


def test_score_disagreeing_with_its_aggregate_fails(chain_dir):
    path = chain_dir / "results/scores/base/sde8/seed0.json"
    record = read_json(path)
    record["metrics"]["gen_ppl"] = 1.0
    write_json(path, record)
    broken = pv.audit(chain_dir / FIGURE, root=chain_dir).broken()
    assert [(l.kind, l.status) for l in broken] == [("scores", pv.CHANGED)]
    assert "gen_ppl is 1.0 here but 100.0" in " ".join(broken[0].problems)


def test_untraceable_start_fails_clearly(chain_dir, capsys):
    (chain_dir / "reports/figures/F9.json").unlink()
    code, _, err = audit_cli(capsys, chain_dir, FIGURE)
    assert code == 2 and "no sidecar F9.json" in err
    code, _, err = audit_cli(capsys, chain_dir, "reports/figures/nothing.png")
    assert code == 2 and "not found" in err


# --------------------------------------------------------------------------------------------------
# Hub revisions (datasets, tokenizer / encoder, scorer, released checkpoints) are shown
# --------------------------------------------------------------------------------------------------

def test_audit_shows_the_hub_revision_of_every_source(chain_dir, capsys):
    tokens = chain_dir / "results/data/toy/tokens/provenance.json"
    write_json(tokens, {**read_json(tokens), "settings": {
        "name": "embedded-language-flows/xsum_{split}_t5", "source": "authors", "revision": "d1e2",
        "test": {"name": "EdinburghNLP/xsum", "revision": "7d4d486"}}})
    write_json(chain_dir / "results/models/scorer/provenance.json", provenance(settings={
        "source": "pretrained", "name_or_path": "gpt2-large", "revision": "r1"}))
    code, out, _ = audit_cli(capsys, chain_dir, FIGURE)
    assert code == 0, out
    dataset = next(line for line in out.splitlines() if "dataset  " in line)
    assert "source=authors" in dataset and "revision=d1e2" in dataset
    assert "test_split=EdinburghNLP/xsum@7d4d486" in dataset
    scorer = next(line for line in out.splitlines() if "scorer  " in line)
    assert "name=gpt2-large" in scorer and "revision=r1" in scorer
    named = pv.Tracer(chain_dir).tokenizer({"name_or_path": "t5-small@abc123"}, "a store")
    assert named.status == pv.NAMED and named.info["revision"] == "abc123"
    assert pv.Tracer(chain_dir).encoder({"name_or_path": "t5-small"}, "a store").info["revision"] \
        == "default branch"


def test_audit_of_a_released_run_shows_its_repo_revision_and_commit(chain_dir, capsys):
    run_dir = chain_dir / "results/runs/rel"
    shutil.copytree(chain_dir / "results/runs/base", run_dir)
    meta = read_json(run_dir / "config.json")
    meta["run"]["kind"], meta["store"] = "released", None
    meta["released"] = {"source": "embedded-language-flows/ELF-B-owt-torch", "revision": "v1",
                        "commit": "0123456789abcdef0123456789abcdef01234567",
                        "filename": "checkpoint_95085", "step": 95085, "sha256": "ab" * 32,
                        "ema_weights": "ema_params1"}
    write_json(run_dir / "config.json", meta)
    code, out, _ = audit_cli(capsys, chain_dir, "results/runs/rel")
    assert code == 0, out
    line = next(line for line in out.splitlines() if "run config" in line)
    for shown in ("released_source=embedded-language-flows/ELF-B-owt-torch", "released_revision=v1",
                  "released_commit=0123456789abcdef0123456789abcdef01234567",
                  "released_filename=checkpoint_95085", "released_step=95085",
                  "released_ema_weights=ema_params1"):
        assert shown in line, (shown, line)
