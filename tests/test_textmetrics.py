"""BLEU / ROUGE (spec §6) equal direct sacrebleu / rouge_score calls, with the paper's settings;
``elf score`` end to end for the two conditional tasks."""

from __future__ import annotations

import math

import pytest
import sacrebleu
from rouge_score import rouge_scorer

from elf.cli import main
from elf.artifacts.records import read_samples, write_samples
from elf.evaluate.textmetrics import bleu, mean_and_se, rouge, rouge_per_example, sentence_bleus
from elf.artifacts import file_sha256, read_json

REFS = ["The cat sat on the mat today .", "A quick brown fox jumps over the lazy dog .",
        "It was raining in Berlin all week .", "She is running to the station ."]
HYPS = ["the cat sat on a mat today .", "a quick brown fox jumped over the dog .",
        "it rained in berlin all week long .", "she runs to the station ."]


def test_bleu_equals_direct_sacrebleu_call():
    score, signature = bleu(HYPS, REFS)
    direct = sacrebleu.corpus_bleu(HYPS, [REFS], lowercase=True, use_effective_order=True)
    assert score == pytest.approx(direct.score)
    assert "case:lc" in signature and "eff:yes" in signature and "nrefs:1" in signature


def test_bleu_is_lowercased_and_uses_effective_order():
    upper = [h.upper() for h in HYPS]
    assert bleu(upper, REFS)[0] == pytest.approx(bleu(HYPS, REFS)[0])
    assert sacrebleu.corpus_bleu(upper, [REFS]).score < bleu(HYPS, REFS)[0]
    # a two-word sentence has no 3- or 4-grams: effective order keeps its (perfect) BLEU at 100
    assert bleu(["Hello there"], ["hello there"])[0] == pytest.approx(100.0)


def test_rouge_equals_direct_rouge_score_call():
    result = rouge(HYPS, REFS)
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    for rouge_type in ("rouge1", "rouge2", "rougeL"):
        values = [100 * scorer.score(r, h)[rouge_type].fmeasure for h, r in zip(HYPS, REFS)]
        mean = sum(values) / len(values)
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))  # population (authors)
        assert result[rouge_type] == pytest.approx(mean)
        assert result[f"{rouge_type}_se"] == pytest.approx(sd / 2.0)  # sqrt(4) examples
        assert len(set(values)) > 1  # so the sample deviation (÷ 3) would differ
    assert result["n_examples"] == 4


def test_per_example_bleu_and_rouge_equal_direct_calls():
    direct = [sacrebleu.sentence_bleu(h, [r], lowercase=True, use_effective_order=True).score
              for h, r in zip(HYPS, REFS)]
    assert sentence_bleus(HYPS, REFS) == pytest.approx(direct)
    assert sentence_bleus(["the cat"], ["the cat"])[0] == pytest.approx(100.0)  # effective order
    per_example = rouge_per_example(HYPS, REFS)
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    assert [e["rougeL"] for e in per_example] == pytest.approx(
        [100 * scorer.score(r, h)["rougeL"].fmeasure for h, r in zip(HYPS, REFS)])
    assert sum(e["rouge2"] for e in per_example) / 4 == pytest.approx(rouge(HYPS, REFS)["rouge2"])


def test_rouge_stems():
    assert rouge(["running dogs"], ["run dog"])["rouge1"] == pytest.approx(100.0)
    unstemmed = rouge_scorer.RougeScorer(["rouge1"], use_stemmer=False)
    assert unstemmed.score("run dog", "running dogs")["rouge1"].fmeasure == 0.0


def test_mean_and_se_by_hand():
    assert mean_and_se([1.0, 2.0, 3.0, 6.0]) == pytest.approx((3.0, math.sqrt(14 / 3 / 4)))
    assert mean_and_se([5.0]) == (5.0, 0.0)
    assert mean_and_se([1.0, 2.0, 3.0, 6.0], ddof=0) == pytest.approx((3.0, math.sqrt(14 / 4 / 4)))


def write_conditional_samples(path):
    header = {"run": "wmt-b", "sampler": "ode64", "seed": 3, "checkpoint": "ckpt.pt",
              "checkpoint_sha256": "0" * 64, "sampler_settings": {}, "code_version": "test"}
    rows = [{"i": i, "text": h, "token_ids": [1, 2], "source": "src", "reference": r}
            for i, (h, r) in enumerate(zip(HYPS, REFS))]
    write_samples(path, header, rows)
    return header


@pytest.mark.parametrize("task", ["translation", "summarization"])
def test_score_stage_conditional(tmp_path, task):
    samples, out = tmp_path / "seed3.jsonl", tmp_path / "score.json"
    header = write_conditional_samples(samples)
    assert read_samples(samples) == (header, read_samples(samples)[1])
    assert main(["score", "--samples", str(samples), "--task", task, "--out", str(out)]) == 0
    score = read_json(out)
    assert score["samples_provenance"] == header
    assert score["provenance"]["samples_sha256"] == file_sha256(samples)
    assert [e["i"] for e in score["per_sample"]] == list(range(len(HYPS)))
    if task == "translation":
        assert [e["bleu"] for e in score["per_sample"]] == pytest.approx(sentence_bleus(HYPS, REFS))
        assert score["metrics"]["bleu"] == pytest.approx(bleu(HYPS, REFS)[0])
        assert score["metrics"]["bleu_signature"] == bleu(HYPS, REFS)[1]
    else:
        expected = rouge(HYPS, REFS)
        assert score["per_sample"][1]["rouge1"] == pytest.approx(rouge_per_example(HYPS, REFS)[1]["rouge1"])
        for key in ("rouge1", "rouge2", "rougeL", "rouge1_se", "rouge2_se", "rougeL_se", "n_examples"):
            assert score["metrics"][key] == pytest.approx(expected[key])


def test_samples_file_round_trip(tmp_path):
    rows = [{"i": 0, "text": "line\u2028sep\nnewline \u00e9", "token_ids": [3, 4]},
            {"i": 1, "text": "", "token_ids": []}]
    write_samples(tmp_path / "s.jsonl", {"seed": 1, "run": "r"}, rows)
    assert read_samples(tmp_path / "s.jsonl") == ({"seed": 1, "run": "r"}, rows)


def test_score_stage_needs_references(tmp_path, capsys):
    samples = tmp_path / "s.jsonl"
    write_samples(samples, {"seed": 0}, [{"i": 0, "text": "a", "token_ids": []}])
    assert main(["score", "--samples", str(samples), "--task", "translation",
                 "--out", str(tmp_path / "o.json")]) == 2
    assert "reference" in capsys.readouterr().err
    assert not (tmp_path / "o.json").exists()
