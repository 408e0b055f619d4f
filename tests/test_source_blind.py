"""The source-blind calibration of conditional scores (elf/evaluate/source_blind.py)."""

import pytest

from elf.evaluate.source_blind import other_references, source_blind_scores


def test_other_references_rolls_every_example_to_another():
    assert other_references(["a", "b", "c"]) == ["b", "c", "a"]
    assert other_references(["a", "b", "c"], shift=2) == ["c", "a", "b"]


@pytest.mark.parametrize("refs,shift", [(["only"], 1), (["a", "b"], 2)])
def test_other_references_refuses_a_shift_that_keeps_examples(refs, shift):
    with pytest.raises(ValueError, match="source-blind"):
        other_references(refs, shift)


def test_copying_outputs_score_100_against_own_reference_and_less_against_others():
    refs = ["the cat sat on the mat .", "a dog ran in the park .", "two birds sang near the tree ."]
    scores = source_blind_scores("translation", refs, refs)["metrics"]["bleu"]
    assert scores["score"] == pytest.approx(100.0)
    assert scores["source_blind"] < 30.0
    # the outputs are the references, so both calibrations are the same comparison
    assert scores["source_blind"] == pytest.approx(scores["reference_blind"])


def test_summaries_sharing_only_a_frame_score_the_frame_blind():
    refs = ["in the garden, the bee sang.", "at sea, the crab swam.", "on the farm, the cow fed the pig."]
    hyps = ["in the garden, the bee sang.", "at sea, the gull dived.", "on the farm, the hen dozed."]
    m = source_blind_scores("summarization", hyps, refs)["metrics"]
    assert set(m) == {"rouge1", "rouge2", "rougeL"}
    assert m["rouge2"]["score"] > m["rouge2"]["source_blind"]
    assert 0 < m["rouge1"]["source_blind"] < m["rouge1"]["score"]


def test_unknown_task_fails_cleanly():
    with pytest.raises(ValueError, match="unknown conditional task"):
        source_blind_scores("captioning", ["a", "b"], ["a", "b"])


def test_flat_metrics_name_each_calibration_after_its_metric():
    from elf.evaluate.source_blind import source_blind_metrics

    refs = ["the cat sat .", "a dog ran .", "two birds sang ."]
    flat = source_blind_metrics("translation", refs, refs)
    assert set(flat) == {"bleu_source_blind", "bleu_reference_blind"}
    assert flat["bleu_source_blind"] == flat["bleu_reference_blind"]
