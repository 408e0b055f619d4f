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


def reference_rows(model, token_lists):
    """Per text (Σ NLL, count), one forward per scored prefix (no padding ever enters the model),
    every text padded with EOS to the longest of the whole set (the released scorer)."""
    longest = max(len(ids) for ids in token_lists)
    rows = []
    for ids in token_lists:
        seq = ids + [0] * (longest - len(ids))
        first_eos = seq.index(0) if 0 in seq else None
        nll_sum, count = 0.0, 0
        for pos in range(1, longest):
            if seq[pos] == 0 and pos != first_eos:
                continue
            with torch.no_grad():
                logits = model(torch.tensor([seq[:pos]])).logits[0, -1]
            nll_sum -= float(torch.log_softmax(logits.double(), -1)[seq[pos]])
            count += 1
        rows.append((nll_sum, count))
    return rows


def test_retokenize_matches_hand_ids(tokenizer):
    assert retokenize(TEXTS, tokenizer, CONTEXT) == [hand_ids(t) for t in TEXTS]
    assert len(retokenize([LONG], tokenizer, None)[0]) == 21


@pytest.mark.parametrize("batch_size", [1, 3, 64])
def test_gen_ppl_matches_prefix_by_prefix_computation(model, tokenizer, batch_size):
    """Every text padded to the set's longest (16, LONG cut at the context): a b c d e 4 + its first
    pad EOS; b c 1 + 1; a EOS c d: EOS, c, d; EOS a b: a, b (its padding is a second EOS); LONG 15."""
    result = gen_ppl(TEXTS, model, tokenizer, batch_size=batch_size, max_length=CONTEXT, progress=False)
    rows = reference_rows(model, [hand_ids(t) for t in TEXTS if t])
    ref_sum, ref_count = sum(r[0] for r in rows), sum(r[1] for r in rows)
    assert [r[1] for r in rows] == [5, 2, 3, 2, 15]
    assert result["n_scored_tokens"] == ref_count == 27
    assert result["n_empty"] == 1
    assert result["n_samples"] == 5
    assert result["nll_sum"] == pytest.approx(ref_sum, rel=1e-5)
    assert result["gen_ppl"] == pytest.approx(math.exp(ref_sum / ref_count), rel=1e-5)
    per_sample = [p for p in result["per_sample"] if p is not None]
    assert per_sample == pytest.approx([math.exp(a / n) for a, n in rows], rel=1e-5)
    assert result["per_sample"][TEXTS.index("")] is None


@pytest.mark.parametrize("batch_size", [1, 64])
def test_a_set_longer_than_the_context_is_scored_in_context_sized_chunks(model, tokenizer, batch_size):
    """Untruncated, the set is 21 long: chunk 1 (positions 0–15) is the truncated set's computation,
    chunk 2 (16–20) holds LONG's tail alone, scored on its own from its position 1 (4 targets); the
    other rows are padding there and count nothing."""
    whole = gen_ppl(TEXTS, model, tokenizer, batch_size=batch_size, max_length=None, progress=False)
    cut = gen_ppl(TEXTS, model, tokenizer, batch_size=batch_size, max_length=CONTEXT, progress=False)
    tail = [WORD_ID[w] for w in LONG.split()][CONTEXT:]
    (tail_sum, tail_count), = reference_rows(model, [tail])
    assert tail_count == 4 and whole["n_scored_tokens"] == cut["n_scored_tokens"] + 4 == 31
    assert whole["nll_sum"] == pytest.approx(cut["nll_sum"] + tail_sum, rel=1e-5)
    k = TEXTS.index(LONG)
    assert whole["per_sample_tokens"][k] == 19 and whole["per_sample_nll"][k] == pytest.approx(
        cut["per_sample_nll"][k] + tail_sum, rel=1e-5)
    assert whole["per_sample_nll"][0] == pytest.approx(cut["per_sample_nll"][0], rel=1e-6)
    # the default truncation (GPT-2's 1024) is above this model's 16 positions: chunked too
    assert gen_ppl(TEXTS, model, tokenizer, progress=False)["n_scored_tokens"] == 31


def test_gen_ppl_does_not_depend_on_the_batch_size(model, tokenizer):
    g = torch.Generator().manual_seed(1)
    texts = [" ".join("abcdefghij"[int(i)] for i in torch.randint(0, 10, (int(n),), generator=g))
             for n in torch.randint(1, 20, (70,), generator=g)]
    results = [gen_ppl(texts, model, tokenizer, batch_size=b, progress=False) for b in (1, 3, 64)]
    assert len({r["n_scored_tokens"] for r in results}) == 1
    for other in results[1:]:
        assert other["gen_ppl"] == pytest.approx(results[0]["gen_ppl"], rel=1e-6)
        assert other["per_sample"] == pytest.approx(results[0]["per_sample"], rel=1e-6)


def test_every_shorter_sample_pays_its_first_padding_eos(model, tokenizer):
    """The released scorer's detail: only the set's longest text predicts no EOS, whatever the
    batching."""
    short, longer = hand_ids("a b c"), hand_ids("a b c d")
    alone = [gen_ppl([text], model, tokenizer, progress=False) for text in ("a b c", "a b c d")]
    with torch.no_grad():
        logits = model(torch.tensor([short])).logits[0, -1]
    eos_nll = -float(torch.log_softmax(logits.double(), -1)[0])
    for batch_size in (1, 2):
        pair = gen_ppl(["a b c", "a b c d"], model, tokenizer, batch_size=batch_size, progress=False)
        assert pair["n_scored_tokens"] == len(short) - 1 + 1 + len(longer) - 1 == 6
        assert pair["nll_sum"] - sum(r["nll_sum"] for r in alone) == pytest.approx(eos_nll, rel=1e-4)


def test_empty_and_whitespace_only_samples_are_dropped(model, tokenizer):
    with_empty = gen_ppl(["", "a b c", " \n\t", "d e"], model, tokenizer, batch_size=2,
                         progress=False)
    without = gen_ppl(["a b c", "d e"], model, tokenizer, batch_size=2, progress=False)
    assert with_empty["n_empty"] == 2 and without["n_empty"] == 0
    assert with_empty["n_samples"] == 2 and with_empty["per_sample"][2] is None
    assert with_empty["gen_ppl"] == pytest.approx(without["gen_ppl"], rel=1e-6)
    with pytest.warns(UserWarning, match="no counted target"):
        nothing = gen_ppl(["", "  "], model, tokenizer, progress=False)
    assert math.isnan(nothing["gen_ppl"]) and nothing["n_empty"] == 2
    # entropy drops them too: " \n\t" would otherwise count as a sample of entropy 0
    entropy = text_entropy(["a b", " \n\t", "c"], tokenizer)
    assert entropy["n_empty"] == 1 and entropy["n_samples"] == 2
    assert entropy["entropy"] == pytest.approx(math.log(2) / 2)
    assert entropy["per_sample"][1] is None


def test_one_token_texts_are_scored_without_an_exception(model, tokenizer):
    """A batch whose texts are one token long: with a longer text in the set each still predicts its
    padding EOS; if the whole set is one token long nothing is predicted (nan, with a warning)."""
    mixed = gen_ppl(["a", "b", "a b c"], model, tokenizer, batch_size=2, progress=False)
    rows = reference_rows(model, [[1], [2], [1, 2, 3]])
    assert [r[1] for r in rows] == [1, 1, 2] and mixed["n_scored_tokens"] == 4
    assert mixed["per_sample"][:2] == pytest.approx([math.exp(r[0]) for r in rows[:2]], rel=1e-5)
    with pytest.warns(UserWarning, match="no counted target"):
        alone = gen_ppl(["a", "b"], model, tokenizer, batch_size=1, progress=False)
    assert math.isnan(alone["gen_ppl"]) and alone["per_sample"] == [None, None]
    assert alone["n_samples"] == 2 and alone["n_scored_tokens"] == 0


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
