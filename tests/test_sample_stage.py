"""``elf sample`` and ``elf trajectory`` end to end on a tiny checkpoint and tokenizer built here.

The checkpoint is a small random ELF (non-zero denoise head) saved with ``save_final`` and a
config.json like ``elf train`` writes; the tokenizer is a word-level one over "w3" … "w31"
(pad 0, EOS 1, unk 2) saved with ``save_pretrained``.
"""

from __future__ import annotations

import json

import pytest
import torch

import elf.flow.sampling as sampling
from elf.cli import main
from elf.config import DatasetSettings, EmbeddingSettings, RunSettings, SamplerSettings, to_dict
from elf.artifacts.records import read_samples
from elf.flow.samplers import time_grid
from elf.flow.sampling import closest_steps
from elf.train.checkpoint import model_meta, save_final
from tests.helpers import TINY, tiny_model

SAMPLER = dict(method="sde", steps=3, gamma=1.0, grid="logit_normal", sc_cfg=2.0)


def build_tokenizer(path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{f"w{i}": i for i in range(3, TINY["vocab_size"])}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>",
                                        eos_token="</s>", unk_token="<unk>")
    tokenizer.save_pretrained(path)


def build_checkpoint(path, **recorded):
    model = tiny_model(0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.final_layer.linear.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    dataset = DatasetSettings(task="unconditional", source="embedded", name="toy",
                              max_length=TINY["max_length"])
    meta = model_meta(model.cfg, run=to_dict(RunSettings(dataset="toy")), dataset=to_dict(dataset),
                      embedding=to_dict(EmbeddingSettings()), **recorded)
    save_final(path, model.state_dict(), model.state_dict(), meta)


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("assets")
    build_checkpoint(root / "run")
    build_tokenizer(root / "tok")
    return root


def sample(assets, out, seed=0, n=6, batch_size=2, sampler=SAMPLER) -> int:
    return main(["sample", "--checkpoint", str(assets / "run"), "--sampler", json.dumps(sampler),
                 "--sampler-name", "sde3", "--seed", str(seed), "--n", str(n),
                 "--batch-size", str(batch_size), "--tokenizer", str(assets / "tok"),
                 "--out", str(out), "--no-progress"])


def token_ids(path):
    return [row["token_ids"] for row in read_samples(path)[1]]


def test_same_seed_same_samples(assets, tmp_path):
    assert sample(assets, tmp_path / "a.jsonl") == 0
    assert sample(assets, tmp_path / "b.jsonl") == 0
    (prov_a, rows_a), (_, rows_b) = read_samples(tmp_path / "a.jsonl"), read_samples(tmp_path / "b.jsonl")
    assert rows_a == rows_b
    assert [row["i"] for row in rows_a] == list(range(6))
    assert prov_a["seed"] == 0 and prov_a["sampler"] == "sde3" and prov_a["batch_size"] == 2
    assert prov_a["sampler_settings"] == to_dict(SamplerSettings(**SAMPLER))
    assert len(prov_a["checkpoint_sha256"]) == 64
    assert not (tmp_path / "a.jsonl.partial").exists()
    assert all(row["token_ids"] for row in rows_a)  # a random model rarely emits EOS first
    assert all(1 not in row["token_ids"] and 0 not in row["token_ids"] for row in rows_a)


def test_six_seeds_six_different_sample_sets(assets, tmp_path):
    sets = []
    for seed in range(6):
        assert sample(assets, tmp_path / f"seed{seed}.jsonl", seed=seed, n=2) == 0
        sets.append(token_ids(tmp_path / f"seed{seed}.jsonl"))
        assert read_samples(tmp_path / f"seed{seed}.jsonl")[0]["seed"] == seed
    assert len({json.dumps(s) for s in sets}) == 6


def sample_seeds(assets, out_dir, seeds, n=4, batch_size=2) -> int:
    return main(["sample", "--checkpoint", str(assets / "run"), "--sampler", json.dumps(SAMPLER),
                 "--sampler-name", "sde3", "--seed", *map(str, seeds), "--n", str(n),
                 "--batch-size", str(batch_size), "--tokenizer", str(assets / "tok"),
                 "--out-dir", str(out_dir), "--no-progress"])


def test_several_seeds_in_one_call_equal_one_call_each(assets, tmp_path):
    out = tmp_path / "sde3"
    assert sample_seeds(assets, out, [0, 2, 5]) == 0
    assert sorted(f.name for f in out.iterdir()) == ["seed0.jsonl", "seed2.jsonl", "seed5.jsonl"]
    assert not (tmp_path / "sde3.partial").exists()
    for seed in (0, 2, 5):
        assert sample(assets, tmp_path / f"alone{seed}.jsonl", seed=seed, n=4) == 0
        together, alone = read_samples(out / f"seed{seed}.jsonl"), read_samples(tmp_path / f"alone{seed}.jsonl")
        assert together[1] == alone[1] and together[0]["seed"] == seed


def test_several_seeds_resume_after_a_kill_and_drop_unasked_seeds(assets, tmp_path, monkeypatch):
    out = tmp_path / "sde3"
    assert sample_seeds(assets, tmp_path / "ref", [0, 1]) == 0
    real, calls = sampling.sample_batch, []

    def failing(*args, **kwargs):
        if len(calls) == 3:  # seed 0 (2 batches) done, seed 1's first batch done
            raise Interrupt("simulated kill")
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(sampling, "sample_batch", failing)
    with pytest.raises(Interrupt):
        sample_seeds(assets, out, [0, 1])
    staging = tmp_path / "sde3.partial"
    assert not out.exists() and (staging / "seed0.jsonl").exists()
    assert (staging / "seed1.jsonl.partial").exists()
    (staging / "seed7.jsonl").write_text("from an older seed list")
    monkeypatch.setattr(sampling, "sample_batch", real)
    seen = counting(monkeypatch)
    assert sample_seeds(assets, out, [0, 1]) == 0
    assert seen == [(2, 4)]  # only seed 1's second batch was left
    assert sorted(f.name for f in out.iterdir()) == ["seed0.jsonl", "seed1.jsonl"]
    for seed in (0, 1):
        assert read_samples(out / f"seed{seed}.jsonl") == read_samples(tmp_path / "ref" / f"seed{seed}.jsonl")


def test_several_seeds_need_a_folder(assets, tmp_path, capsys):
    assert main(["sample", "--checkpoint", str(assets / "run"), "--sampler", json.dumps(SAMPLER),
                 "--seed", "0", "1", "--n", "2", "--tokenizer", str(assets / "tok"),
                 "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "--out-dir" in capsys.readouterr().err and not (tmp_path / "x.jsonl").exists()


class Interrupt(RuntimeError):
    pass


def interrupted_run(assets, out, monkeypatch, batches_before_failure=1, batch_size=2):
    """Run the stage with a failure in batch ``batches_before_failure`` (0-based)."""
    real = sampling.sample_batch
    calls = []

    def failing(*args, **kwargs):
        if len(calls) == batches_before_failure:
            raise Interrupt("simulated kill")
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(sampling, "sample_batch", failing)
    with pytest.raises(Interrupt):
        sample(assets, out, batch_size=batch_size)
    monkeypatch.setattr(sampling, "sample_batch", real)


def counting(monkeypatch):
    real, seen = sampling.sample_batch, []

    def spy(job, lo, hi, *rest):
        seen.append((lo, hi))
        return real(job, lo, hi, *rest)

    monkeypatch.setattr(sampling, "sample_batch", spy)
    return seen


def test_interrupted_run_resumes_from_written_batches(assets, tmp_path, monkeypatch):
    assert sample(assets, tmp_path / "full.jsonl") == 0
    out = tmp_path / "resumed.jsonl"
    interrupted_run(assets, out, monkeypatch)
    partial = tmp_path / "resumed.jsonl.partial"
    assert not out.exists() and partial.exists()
    lines = partial.read_text().splitlines()
    assert "provenance" in json.loads(lines[0]) and len(lines) == 1 + 2
    with open(partial, "a") as fh:
        fh.write('{"i": 2, "text": "cut by the ki')  # a line cut by the kill
    seen = counting(monkeypatch)
    assert sample(assets, out) == 0
    assert seen == [(2, 4), (4, 6)]  # batch 0 was not redone
    assert read_samples(out)[1] == read_samples(tmp_path / "full.jsonl")[1]
    assert not partial.exists()


def test_partial_from_another_batch_size_is_not_reused(assets, tmp_path, monkeypatch):
    out = tmp_path / "s.jsonl"
    interrupted_run(assets, out, monkeypatch, batch_size=4)  # 4 rows written
    seen = counting(monkeypatch)
    assert sample(assets, out, batch_size=2) == 0
    assert seen == [(0, 2), (2, 4), (4, 6)]
    monkeypatch.undo()
    assert sample(assets, tmp_path / "ref.jsonl", batch_size=2) == 0
    assert read_samples(out)[1] == read_samples(tmp_path / "ref.jsonl")[1]


def test_bad_sampler_json_is_a_clean_error(assets, tmp_path, capsys):
    assert sample(assets, tmp_path / "x.jsonl", sampler={"method": "heun"}) == 2
    assert "--sampler" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


# --------------------------------------------------------------------------------------------------
# elf trajectory
# --------------------------------------------------------------------------------------------------

def trajectory(assets, out, at, sampler, n=2, seed=3) -> int:
    return main(["trajectory", "--checkpoint", str(assets / "run"), "--sampler", json.dumps(sampler),
                 "--seed", str(seed), "--n", str(n), "--tokenizer", str(assets / "tok"),
                 "--at", at, "--out", str(out)])


def test_closest_steps():
    assert closest_steps([0.0, 0.25, 0.5, 0.75, 1.0], [0.1, 0.3, 0.2, 0.9, 1.0]) == [0, 1, 4]
    assert closest_steps([0.0, 0.5, 1.0], [0.25]) == [0]  # first on a tie


def test_trajectory_records_closest_steps_and_ends_on_the_samples(assets, tmp_path):
    sampler = dict(SAMPLER, steps=6)
    out = tmp_path / "traj.json"
    assert trajectory(assets, out, "0,0.1,0.3,0.5,0.9,1", sampler) == 0
    blob = json.loads(out.read_text())
    prov, steps = blob["provenance"], blob["steps"]
    g = sampling.batch_generator(3, 0)
    torch.randn(2, TINY["max_length"], TINY["d"], generator=g)  # the initial noise comes first
    grid = time_grid(SamplerSettings(**sampler), g).tolist()
    assert prov["grid"] == pytest.approx(grid) and prov["seed"] == 3
    candidates = grid[:-1] + [1.0]
    expected = sorted({min(range(7), key=lambda i: abs(candidates[i] - a))
                       for a in (0, 0.1, 0.3, 0.5, 0.9, 1)})
    assert [s["step"] for s in steps] == expected
    assert [s["t"] for s in steps] == pytest.approx([candidates[k] for k in expected])
    assert steps[-1]["state"] == "final" and steps[0]["state"] == "x_hat"
    assert all(len(s["texts"]) == 2 for s in steps)
    # the end state is batch 0 of `elf sample` with the same seed and batch size n
    assert sample(assets, tmp_path / "s.jsonl", seed=3, n=2, batch_size=2, sampler=sampler) == 0
    rows = read_samples(tmp_path / "s.jsonl")[1]
    assert steps[-1]["texts"] == [row["text"] for row in rows]
    assert steps[-1]["token_ids"] == [row["token_ids"] for row in rows]
    # the first estimate (from pure noise) is not yet the final text
    assert steps[0]["token_ids"] != steps[-1]["token_ids"]
    # deterministic
    assert trajectory(assets, tmp_path / "again.json", "0,0.1,0.3,0.5,0.9,1", sampler) == 0
    assert json.loads((tmp_path / "again.json").read_text())["steps"] == steps


@pytest.mark.parametrize("command", ["sample", "trajectory"])
def test_a_tokenizer_other_than_the_runs_is_refused_alike(assets, tmp_path, command, capsys):
    """`elf sample` and `elf trajectory` load a checkpoint the same way (``load_checkpoint``): the
    tokenizer must be the one the run recorded."""
    from elf.artifacts import tokenizer_sha256
    from elf.artifacts.names import RUN_TOKENIZER, TOKENIZER_SHA256

    run = tmp_path / "run"
    build_checkpoint(run, **{RUN_TOKENIZER: "the-runs-tokenizer", TOKENIZER_SHA256: "0" * 64})
    assert tokenizer_sha256(assets / "tok") != "0" * 64
    out = tmp_path / ("t.json" if command == "trajectory" else "s.jsonl")
    extra = ["--at", "0,1"] if command == "trajectory" else ["--sampler-name", "sde3"]
    assert main([command, "--checkpoint", str(run), "--sampler", json.dumps(SAMPLER), "--seed", "0",
                 "--n", "2", "--tokenizer", str(assets / "tok"), "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert f"--tokenizer {assets / 'tok'}" in err and "the-runs-tokenizer" in err
    assert not out.exists()


@pytest.mark.parametrize("at", ["0.5,2", "a,b", ""])
def test_trajectory_rejects_bad_times(assets, tmp_path, at, capsys):
    assert trajectory(assets, tmp_path / "t.json", at, SAMPLER) == 2
    assert "--at" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("flag, sampler_precision, expected", [
    ([], "policy", "fp32"),                              # the checkpoint records no policy: fp32
    (["--precision", "bf16"], "policy", "bf16"),         # the experiment's policy (paper config)
    (["--precision", "bf16"], "fp32", "fp32"),           # the sampler setting's fp32 switch
])
def test_rollout_runs_under_the_precision_policy(assets, tmp_path, monkeypatch, flag,
                                                 sampler_precision, expected):
    from elf.model import ELF

    autocast_on, forward = [], ELF.forward

    def spy(self, *args, **kwargs):
        autocast_on.append(torch.is_autocast_enabled("cpu"))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(ELF, "forward", spy)
    out = tmp_path / "s.jsonl"
    assert main(["sample", "--checkpoint", str(assets / "run"), "--sampler",
                 json.dumps({**SAMPLER, "precision": sampler_precision}), "--seed", "0", "--n", "2",
                 "--tokenizer", str(assets / "tok"), "--out", str(out), "--no-progress", *flag]) == 0
    assert read_samples(out)[0]["precision"] == expected
    assert autocast_on and set(autocast_on) == {expected == "bf16"}


def test_rollout_precision_defaults_to_the_checkpoints_policy():
    policy, fp32 = SamplerSettings(), SamplerSettings(precision="fp32")
    trained_bf16 = {"precision": "bf16"}
    assert sampling.rollout_precision(None, policy, trained_bf16) == "bf16"
    assert sampling.rollout_precision(None, policy, {}) == "fp32"
    assert sampling.rollout_precision("bf16", fp32, trained_bf16) == "fp32"
