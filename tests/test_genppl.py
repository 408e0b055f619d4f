"""Gen. PPL and entropy (spec §6) against an independent, one-prefix-at-a-time computation.

A tiny word-level tokenizer (ids known by hand) and a tiny random GPT-2 with a 16-token context.
"""

from __future__ import annotations

import math

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from elf.evaluate.entropy import mean_entropy, text_entropy, unigram_entropy
from elf.evaluate.genppl import counted_targets, gen_ppl, retokenize

EOS = "<|endoftext|>"
WORDS = [EOS] + list("abcdefghij")
WORD_ID = {w: i for i, w in enumerate(WORDS)}
CONTEXT = 16

LONG = " ".join("abcdefghij"[i % 10] for i in range(21))  # 21 tokens: truncated to 16
TEXTS = ["a b c d e", "b c", f"a {EOS} c d", "", f"{EOS} a b", LONG]


@pytest.fixture(scope="module")
def tokenizer():
    backend = Tokenizer(models.WordLevel(dict(WORD_ID), unk_token=EOS))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(WORDS), n_positions=CONTEXT, n_embd=32, n_layer=2, n_head=4,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config).eval()


def hand_ids(text: str) -> list[int]:
    """Token ids from the word table, without the tokenizer; cut at the model's context."""
    return [WORD_ID[w] for w in text.split()][:CONTEXT]


def reference_nll(model, token_lists, batch_size):
    """Σ NLL and count, one forward per scored prefix (no padding ever enters the model)."""
    scored = [ids for ids in token_lists if ids]
    nll_sum, count = 0.0, 0
    for start in range(0, len(scored), batch_size):
        batch = scored[start:start + batch_size]
        longest = max(len(ids) for ids in batch)
        for ids in batch:
            seq = ids + [0] * (longest - len(ids))
            first_eos = seq.index(0) if 0 in seq else None
            for pos in range(1, longest):
                if seq[pos] == 0 and pos != first_eos:
                    continue
                with torch.no_grad():
                    logits = model(torch.tensor([seq[:pos]])).logits[0, -1]
                nll_sum -= float(torch.log_softmax(logits.double(), -1)[seq[pos]])
                count += 1
    return nll_sum, count


def test_retokenize_matches_hand_ids(tokenizer):
    assert retokenize(TEXTS, tokenizer, CONTEXT) == [hand_ids(t) for t in TEXTS]
    assert len(retokenize([LONG], tokenizer, None)[0]) == 21


@pytest.mark.parametrize("batch_size, expected_count", [
    # batch [s0, s1, s2] padded to 5: 4 + (1 + first pad) + (EOS, c, d) = 9;
    # batch [s4, s5] padded to 16: s4 starts with EOS so its padding is a second EOS: 2; s5: 15 -> 26
    (3, 26),
    # alone, no sample has padding: 4 + 1 + 3 + 2 + 15
    (1, 25),
])
def test_gen_ppl_matches_prefix_by_prefix_computation(model, tokenizer, batch_size, expected_count):
    result = gen_ppl(TEXTS, model, tokenizer, batch_size=batch_size, progress=False)
    ref_sum, ref_count = reference_nll(model, [hand_ids(t) for t in TEXTS], batch_size)
    assert ref_count == expected_count
    assert result["n_scored_tokens"] == expected_count
    assert result["n_empty"] == 1
    assert result["n_samples"] == 5
    assert result["nll_sum"] == pytest.approx(ref_sum, rel=1e-5)
    assert result["gen_ppl"] == pytest.approx(math.exp(ref_sum / ref_count), rel=1e-5)


def test_gen_ppl_longest_sample_pays_no_eos(model, tokenizer):
    """The released scorer's detail: the shorter sample is charged its first padding EOS."""
    pair = gen_ppl(["a b c", "a b c d"], model, tokenizer, batch_size=2, progress=False)
    alone = gen_ppl(["a b c", "a b c d"], model, tokenizer, batch_size=1, progress=False)
    assert pair["n_scored_tokens"] == alone["n_scored_tokens"] + 1 == 6
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3]])).logits[0, -1]
    eos_nll = -float(torch.log_softmax(logits.double(), -1)[0])
    assert pair["nll_sum"] - alone["nll_sum"] == pytest.approx(eos_nll, rel=1e-4)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_per_sample_perplexity_is_each_text_scored_alone_in_its_batch(model, tokenizer, batch_size):
    result = gen_ppl(TEXTS, model, tokenizer, batch_size=batch_size, progress=False)
    per_sample = result["per_sample"]
    assert len(per_sample) == len(TEXTS) and per_sample[TEXTS.index("")] is None
    for text, value in zip(TEXTS, per_sample):
        if text and batch_size == 1:  # alone: the text's own corpus perplexity
            assert value == pytest.approx(gen_ppl([text], model, tokenizer, batch_size=1,
                                                  progress=False)["gen_ppl"], rel=1e-5)
    # the corpus value weights each sample by its counted tokens
    ids = [hand_ids(t) for t in TEXTS if t]
    sums, counts = zip(*(reference_nll(model, [i], 1) for i in ids))
    if batch_size == 1:
        assert result["nll_sum"] == pytest.approx(sum(sums), rel=1e-5)
        assert [p for p in per_sample if p is not None] == pytest.approx(
            [math.exp(s / c) for s, c in zip(sums, counts)], rel=1e-5)


def test_empty_samples_are_skipped(model, tokenizer):
    with_empty = gen_ppl(["", "a b c", "", "d e"], model, tokenizer, batch_size=2, progress=False)
    without = gen_ppl(["a b c", "d e"], model, tokenizer, batch_size=2, progress=False)
    assert with_empty["n_empty"] == 2 and without["n_empty"] == 0
    assert with_empty["gen_ppl"] == pytest.approx(without["gen_ppl"], rel=1e-6)
    nothing = gen_ppl(["", ""], model, tokenizer, progress=False)
    assert math.isnan(nothing["gen_ppl"]) and nothing["n_empty"] == 2


def test_counted_targets_rule():
    ids = torch.tensor([[5, 0, 6, 0, 0], [0, 5, 0, 0, 0], [5, 6, 7, 8, 9]])
    assert counted_targets(ids, 0).tolist() == [[True, True, False, False],
                                                [True, False, False, False],
                                                [True, True, True, True]]


def test_pad_token_defaults_to_eos(model):
    backend = Tokenizer(models.WordLevel(dict(WORD_ID), unk_token=EOS))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fresh = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS)
    assert fresh.pad_token is None
    gen_ppl(["a b"], model, fresh, progress=False)
    assert fresh.pad_token_id == fresh.eos_token_id == 0


def test_unigram_entropy_by_hand(tokenizer):
    assert unigram_entropy([1, 1, 2, 3]) == pytest.approx(1.5 * math.log(2))
    assert unigram_entropy([4]) == 0.0
    result = text_entropy(["a a b c", "d", ""], tokenizer)
    assert result["entropy"] == pytest.approx(0.75 * math.log(2))
    assert result["n_empty"] == 1 and result["n_samples"] == 2
    # untruncated: 21 tokens over 10 words (a appears 3 times, the rest twice)
    expected = -(3 / 21 * math.log(3 / 21) + 9 * 2 / 21 * math.log(2 / 21))
    assert text_entropy([LONG], tokenizer)["entropy"] == pytest.approx(expected)
    # cut at 16 tokens: a..f twice, g..j once
    expected = -(6 * 2 / 16 * math.log(2 / 16) + 4 / 16 * math.log(1 / 16))
    assert text_entropy([LONG], tokenizer, max_length=CONTEXT)["entropy"] == pytest.approx(expected)
    assert math.isnan(mean_entropy([[], []])["entropy"])
