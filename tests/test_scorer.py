"""The embedded GPT-2 scorer: it trains (loss falls), round-trips through from_pretrained, and
``elf score`` scores a samples file and real text with it end to end."""

from __future__ import annotations

import json
import random

import datasets
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from elf.cli import main
from elf.config import ScorerSettings
from elf.evaluate.entropy import text_entropy
from elf.evaluate.repetition import repetition
from elf.evaluate.genppl import GPT2_CONTEXT, gen_ppl
from elf.artifacts.records import read_samples, write_samples
from elf.evaluate.scorer import (EOS_TOKEN, load_scorer, pack_documents, save_scorer,
                                 train_bpe_tokenizer, train_scorer_model)
from elf.evaluate.uncertainty import mean_se, ratio_ppl_se
from elf.artifacts import file_sha256, read_json
from elf.stages import score as score_stage

SETTINGS = {"vocab_size": 300, "layers": 1, "width": 32, "heads": 2, "steps": 40, "batch_size": 8,
            "context": 32, "lr": 3e-3, "seed": 0}
SUBJECTS = ["the cat", "a dog", "my friend", "the teacher", "our neighbour"]
VERBS = ["sees", "likes", "finds", "paints", "follows"]
OBJECTS = ["the river", "a red ball", "the old house", "some bread", "the moon"]


def sentences(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}."
                     for _ in range(rng.randint(2, 5))) for _ in range(n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "owt"
    splits = {"train": ["zzz qqq"] * 5, "heldout": sentences(1, 80), "test": sentences(2, 12)}
    datasets.DatasetDict({k: datasets.Dataset.from_dict({"text": v})
                          for k, v in splits.items()}).save_to_disk(str(path))
    return path


@pytest.fixture(scope="module")
def scorer_dir(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("scorer") / "scorer"
    assert main(["scorer", "--settings", json.dumps(SETTINGS), "--corpus", str(corpus),
                 "--out", str(out), "--device", "cpu"]) == 0
    return out


def test_pack_documents_joins_with_eos():
    backend = Tokenizer(models.WordLevel({EOS_TOKEN: 0, "a": 1, "b": 2, "c": 3}, unk_token=EOS_TOKEN))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS_TOKEN)
    blocks = pack_documents(["a b", "c", "b b"], tokenizer, context=3)
    assert blocks.tolist() == [[1, 2, 0], [3, 0, 2]]  # stream a b E c E b b E, tail dropped


def test_scorer_stage_trains_on_heldout(scorer_dir):
    record = read_json(scorer_dir / "provenance.json")
    assert record["corpus_split"] == "heldout" and record["corpus_documents"] == 80
    losses = record["losses"]
    assert len(losses) == SETTINGS["steps"]
    assert sum(losses[-5:]) / 5 < losses[0] - 1.5  # starts near ln(300) = 5.7, falls well below
    model, tokenizer = load_scorer(scorer_dir)
    assert model.config.n_layer == 1 and model.config.n_embd == 32 and model.config.n_positions == 32
    assert tokenizer.eos_token == tokenizer.bos_token == tokenizer.unk_token == EOS_TOKEN
    assert tokenizer.eos_token_id == model.config.eos_token_id
    assert model.config.vocab_size == len(tokenizer) <= SETTINGS["vocab_size"]


def test_tokenizer_is_byte_level_and_lossless(scorer_dir):
    _, tokenizer = load_scorer(scorer_dir)
    text = f"the cat sees Ünïcode ✓ text{EOS_TOKEN}a dog"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert ids.count(tokenizer.eos_token_id) == 1  # the special token is one id, not bytes


def test_train_save_load_round_trip(corpus, tmp_path):
    texts = sentences(1, 40)
    settings = ScorerSettings(**{**SETTINGS, "steps": 3})
    tokenizer = train_bpe_tokenizer(texts, settings.vocab_size, settings.context)
    model, losses = train_scorer_model(texts, tokenizer, settings, progress=False)
    again, losses_again = train_scorer_model(texts, tokenizer, settings, progress=False)
    assert losses == losses_again  # seeded: init and batches
    save_scorer(model, tokenizer, tmp_path / "s", {"note": "test"})
    loaded, loaded_tokenizer = load_scorer(tmp_path / "s")
    ids = torch.tensor([tokenizer(texts[0])["input_ids"][:20]])
    assert loaded_tokenizer(texts[0])["input_ids"] == tokenizer(texts[0])["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits)
    assert read_json(tmp_path / "s" / "provenance.json")["note"] == "test"


def test_score_stage_unconditional(scorer_dir, tmp_path):
    texts = sentences(3, 6) + ["", "the cat " * 40]  # one empty, one longer than the context
    header = {"checkpoint": "ckpt.pt", "checkpoint_sha256": "0" * 64, "run": "owt-b",
              "sampler": "sde32", "sampler_settings": {"steps": 32}, "seed": 4, "code_version": "test"}
    samples, out = tmp_path / "seed4.jsonl", tmp_path / "seed4.json"
    write_samples(samples, header, [{"i": i, "text": t, "token_ids": [1]} for i, t in enumerate(texts)])
    assert read_samples(samples)[1][6]["text"] == ""
    assert main(["score", "--samples", str(samples), "--task", "unconditional", "--scorer",
                 str(scorer_dir), "--out", str(out), "--batch-size", "3", "--device", "cpu"]) == 0
    score = read_json(out)
    model, tokenizer = load_scorer(scorer_dir)
    expected = gen_ppl(texts, model, tokenizer, batch_size=3, max_length=None, progress=False)
    metrics = score["metrics"]
    assert metrics["gen_ppl"] == pytest.approx(expected["gen_ppl"], rel=1e-6)
    assert metrics["n_scored_tokens"] == expected["n_scored_tokens"]
    # whole samples: the long one is scored in chunks of the scorer's 32 positions, its entropy whole
    assert metrics["entropy"] == pytest.approx(text_entropy(texts, tokenizer)["entropy"])
    assert metrics["entropy"] != pytest.approx(text_entropy(texts, tokenizer, max_length=32)["entropy"])
    truncated = gen_ppl(texts, model, tokenizer, batch_size=3, max_length=32, progress=False)
    assert metrics["n_scored_tokens"] > truncated["n_scored_tokens"]
    assert metrics["n_samples"] == 8 and metrics["n_empty"] == 1
    # the SEs over the samples (elf/evaluate/uncertainty.py), from the same per-sample values
    kept = [k for k, v in enumerate(expected["per_sample_tokens"]) if v is not None]
    assert len(kept) == 7 and metrics["gen_ppl_se"] == pytest.approx(ratio_ppl_se(
        [expected["per_sample_nll"][k] for k in kept], [expected["per_sample_tokens"][k] for k in kept]))
    assert metrics["gen_ppl_se"] > 0 and metrics["entropy_se"] == pytest.approx(
        mean_se(text_entropy(texts, tokenizer)["per_sample"]))
    assert score["samples_provenance"] == header
    assert score["provenance"]["samples_sha256"] == file_sha256(samples)
    assert score["provenance"]["scorer"] == str(scorer_dir)
    assert len(score["provenance"]["scorer_sha256"]) == 64
    assert score["provenance"]["metrics_settings"]["context"] == 32
    assert score["provenance"]["metrics_settings"]["truncation"] is None
    per_sample = score["per_sample"]
    assert [e["i"] for e in per_sample] == list(range(8))
    assert per_sample[6] == {"i": 6, "gen_ppl": None, "entropy": None, "repetition": None}  # empty
    assert per_sample[7]["repetition"] == pytest.approx(0.5)  # "the cat the cat ...": "the" is half
    assert metrics["repetition"] == pytest.approx(repetition(texts)["repetition"])
    assert [e["gen_ppl"] for e in per_sample] == pytest.approx(expected["per_sample"], rel=1e-6)
    assert [e["entropy"] for e in per_sample] == pytest.approx(
        text_entropy(texts, tokenizer)["per_sample"])


def test_score_stage_bf16_policy_loads_the_scorer_in_bf16(scorer_dir, tmp_path):
    """``--precision bf16`` (the paper config): the scorer's weights in bf16, as the released scorer."""
    header = {"run": "owt-b", "sampler": "sde32", "seed": 0, "code_version": "test"}
    samples = tmp_path / "seed0.jsonl"
    texts = sentences(3, 6)
    write_samples(samples, header, [{"i": i, "text": t, "token_ids": [1]} for i, t in enumerate(texts)])
    scores = {}
    for precision in ("fp32", "bf16"):
        out = tmp_path / f"{precision}.json"
        assert main(["score", "--samples", str(samples), "--scorer", str(scorer_dir), "--device", "cpu",
                     "--precision", precision, "--out", str(out)]) == 0
        scores[precision] = read_json(out)
    settings = scores["bf16"]["provenance"]["metrics_settings"]
    assert settings["scorer_dtype"] == "bfloat16"
    assert scores["fp32"]["provenance"]["metrics_settings"]["scorer_dtype"] == "float32"
    model, tokenizer = load_scorer(scorer_dir, dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16
    expected = gen_ppl(texts, model, tokenizer, progress=False)["gen_ppl"]
    bf16, fp32 = scores["bf16"]["metrics"]["gen_ppl"], scores["fp32"]["metrics"]["gen_ppl"]
    assert bf16 == pytest.approx(expected, rel=1e-6)
    assert bf16 != fp32 and bf16 == pytest.approx(fp32, rel=0.05)


def test_score_stage_reference_texts(scorer_dir, corpus, tmp_path):
    out = tmp_path / "dataset.json"
    assert main(["score", "--reference-texts", str(corpus), "--n", "5", "--scorer", str(scorer_dir),
                 "--out", str(out), "--device", "cpu"]) == 0
    score = read_json(out)
    assert score["samples_provenance"]["split"] == "test" and score["samples_provenance"]["n"] == 5
    model, tokenizer = load_scorer(scorer_dir)
    expected = gen_ppl(sentences(2, 12)[:5], model, tokenizer, progress=False)
    assert score["metrics"]["gen_ppl"] == pytest.approx(expected["gen_ppl"], rel=1e-6)
    assert score["metrics"]["gen_ppl"] < 300  # a trained scorer finds real text likely
    assert "calibration" not in score


def test_score_stage_rows_like_samples_and_calibration_lines(scorer_dir, tmp_path):
    """With --tokenizer a packed dataset's rows are cut at their first EOS as samples are, and
    shuffled and unigram text of the same rows score worse than the rows themselves."""
    model, tokenizer = load_scorer(scorer_dir)
    texts = sentences(2, 12)
    eos = tokenizer.eos_token_id
    ids = [tokenizer(t)["input_ids"] + [eos] + tokenizer("the moon")["input_ids"] for t in texts]
    packed = tmp_path / "tokens"
    datasets.DatasetDict({"test": datasets.Dataset.from_dict({"input_ids": ids})}).save_to_disk(str(packed))
    out = tmp_path / "dataset.json"
    assert main(["score", "--reference-texts", str(packed), "--n", "12", "--scorer", str(scorer_dir),
                 "--tokenizer", str(scorer_dir), "--out", str(out), "--device", "cpu"]) == 0
    score = read_json(out)
    real = score["metrics"]["gen_ppl"]
    cut = [tokenizer.decode(tokenizer(t)["input_ids"]) for t in texts]  # what follows the EOS is gone
    assert real == pytest.approx(gen_ppl(cut, model, tokenizer, progress=False)["gen_ppl"], rel=1e-6)
    assert set(score["calibration"]) == {"shuffled", "unigram"}
    assert real < score["calibration"]["shuffled"]["gen_ppl"]
    assert real < score["calibration"]["unigram"]["gen_ppl"]


def test_score_stage_several_files_one_folder(scorer_dir, tmp_path):
    """The seeds of one (run, sampler) in one call: each file's score equals scoring it alone."""
    paths = []
    for seed in (0, 1):
        header = {"run": "owt-b", "sampler": "sde32", "seed": seed, "code_version": "test"}
        path = tmp_path / "samples" / f"seed{seed}.jsonl"
        write_samples(path, header, [{"i": i, "text": t, "token_ids": [1]}
                                     for i, t in enumerate(sentences(10 + seed, 4))])
        paths.append(path)
        assert main(["score", "--samples", str(path), "--scorer", str(scorer_dir), "--device", "cpu",
                     "--out", str(tmp_path / f"alone{seed}.json")]) == 0
    out = tmp_path / "scores"
    assert main(["score", "--samples", *map(str, paths), "--scorer", str(scorer_dir), "--device", "cpu",
                 "--out-dir", str(out)]) == 0
    assert sorted(f.name for f in out.iterdir()) == ["seed0.json", "seed1.json"]
    for seed in (0, 1):
        together, alone = read_json(out / f"seed{seed}.json"), read_json(tmp_path / f"alone{seed}.json")
        assert together["metrics"] == alone["metrics"]
        assert together["samples_provenance"]["seed"] == seed


def test_score_stage_bad_file_among_several_writes_nothing(scorer_dir, tmp_path, capsys):
    good = tmp_path / "seed0.jsonl"
    write_samples(good, {"seed": 0}, [{"i": 0, "text": "the cat", "token_ids": [1]}])
    bad = tmp_path / "seed1.jsonl"
    bad.write_text('{"provenance": {}}\n{"i": 0}\n')
    out = tmp_path / "scores"
    assert main(["score", "--samples", str(good), str(bad), "--scorer", str(scorer_dir),
                 "--device", "cpu", "--out-dir", str(out)]) == 2
    assert "seed1.jsonl:2" in capsys.readouterr().err
    assert not out.exists()
    assert main(["score", "--samples", str(good), str(bad), "--scorer", str(scorer_dir),
                 "--out", str(tmp_path / "one.json")]) == 2
    assert "--out-dir" in capsys.readouterr().err


def test_stage_default_context_is_the_released_one():
    assert score_stage.GPT2_CONTEXT == GPT2_CONTEXT == 1024
    assert score_stage.MAX_LENGTH is None   # whole samples, long ones in context-sized chunks


def test_reading_only_some_fields_still_checks_every_row(tmp_path):
    """``read_samples(fields=...)`` (``elf score``: no token ids held) keeps only those keys of each
    row, and refuses a row whose token ids break the header's ``max_tokens`` all the same."""
    from elf.artifacts.records import SamplesFormatError

    path = tmp_path / "seed0.jsonl"
    rows = [{"i": i, "text": f"t{i}", "token_ids": [1, 2, 3]} for i in range(3)]
    write_samples(path, {"n": 3, "max_tokens": 3}, rows)
    header, kept = read_samples(path, fields=("i", "text", "reference"))
    assert header["n"] == 3 and kept == [{"i": i, "text": f"t{i}"} for i in range(3)]
    write_samples(path, {"n": 3, "max_tokens": 2}, rows)
    with pytest.raises(SamplesFormatError, match=r"seed0\.jsonl:2: 3 token ids"):
        read_samples(path, fields=("text",))
