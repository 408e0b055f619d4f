"""Tests of elf.embed.kinds: the four embedding kinds (spec §8), the conditional encoding rules of spec §2,
and the normalisation statistics (elf.embed.normalise). Tiny random T5 encoders only; no network."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import T5Config, T5EncoderModel

from elf.config import EmbeddingSettings
from elf.embed import kinds
from elf.embed import normalise as normalisation

VOCAB = 20


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def encoder() -> T5EncoderModel:
    torch.manual_seed(0)
    config = T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, num_heads=2, d_ff=64, num_layers=2,
                      dropout_rate=0.1, pad_token_id=0, eos_token_id=1)
    return T5EncoderModel(config).eval().requires_grad_(False)


@pytest.fixture(scope="module")
def encoder_dir(encoder, tmp_path_factory):
    path = tmp_path_factory.mktemp("encoder")
    encoder.save_pretrained(path)
    return str(path)


def run(encoder, ids, mask=None):
    with torch.no_grad():
        return encoder(input_ids=ids, attention_mask=mask).last_hidden_state


# Two conditional rows [source ; target ; padding], L = 9.
SRC_LEN = torch.tensor([4, 3])
TGT_LEN = torch.tensor([3, 5])
IDS = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 1, 1],
                    [12, 13, 14, 15, 16, 17, 18, 19, 1]])
ATTENTION = torch.tensor([[1] * 7 + [0] * 2, [1] * 8 + [0]])
SOURCE = torch.tensor([[1] * 4 + [0] * 5, [1] * 3 + [0] * 6])
NO_DROP = torch.tensor([False, False])


# --------------------------------------------------------------------------------------------------
# ContextualEncoder
# --------------------------------------------------------------------------------------------------

def test_contextual_source_rows_equal_encoding_the_source_alone(encoder):
    out = kinds.ContextualEncoder(encoder)(IDS, ATTENTION, SOURCE, NO_DROP)
    assert out.shape == (2, 9, 32) and out.dtype == torch.float32
    for row in range(2):
        s = int(SRC_LEN[row])
        alone = run(encoder, IDS[row: row + 1, :s])[0]
        torch.testing.assert_close(out[row, :s], alone, atol=1e-5, rtol=1e-5)


def test_contextual_source_rows_do_not_see_the_target(encoder):
    embed = kinds.ContextualEncoder(encoder)
    changed = IDS.clone()
    changed[:, 4:7] = 2  # rewrite part of every target
    a, b = embed(IDS, ATTENTION, SOURCE, NO_DROP), embed(changed, ATTENTION, SOURCE, NO_DROP)
    assert torch.equal(a[0, :4], b[0, :4]) and torch.equal(a[1, :3], b[1, :3])
    assert not torch.allclose(a[0, 4:7], b[0, 4:7])


def test_contextual_target_rows_see_the_source(encoder):
    embed = kinds.ContextualEncoder(encoder)
    changed = IDS.clone()
    changed[:, 0] = 2  # rewrite the first source token
    a, b = embed(IDS, ATTENTION, SOURCE, NO_DROP), embed(changed, ATTENTION, SOURCE, NO_DROP)
    assert not torch.allclose(a[0, 4:7], b[0, 4:7])


def test_drop_source_changes_target_rows_only(encoder):
    embed = kinds.ContextualEncoder(encoder)
    kept = embed(IDS, ATTENTION, SOURCE, NO_DROP)
    dropped = embed(IDS, ATTENTION, SOURCE, torch.tensor([True, False]))
    torch.testing.assert_close(dropped[0, :4], kept[0, :4], atol=0, rtol=0)  # source rows
    assert not torch.allclose(dropped[0, 4:7], kept[0, 4:7], atol=1e-4)  # target rows
    torch.testing.assert_close(dropped[1], kept[1], atol=0, rtol=0)  # the row not dropped
    # T5's attention bias is relative, so a dropped target is encoded exactly as the target alone
    alone = run(encoder, IDS[:1, 4:7])[0]
    torch.testing.assert_close(dropped[0, 4:7], alone, atol=1e-5, rtol=1e-5)


def test_unconditional_input_is_plain_bidirectional_attention(encoder):
    embed = kinds.ContextualEncoder(encoder)
    no_source = torch.zeros_like(SOURCE)
    out = embed(IDS, ATTENTION, no_source, NO_DROP)
    torch.testing.assert_close(out, run(encoder, IDS, ATTENTION), atol=1e-5, rtol=1e-5)
    full = torch.ones_like(ATTENTION)
    torch.testing.assert_close(embed(IDS, full, no_source, NO_DROP), run(encoder, IDS),
                               atol=1e-5, rtol=1e-5)


def test_contextual_encoder_stays_frozen_and_deterministic_in_train_mode(encoder):
    embed = kinds.ContextualEncoder(encoder)
    embed.train()  # the encoder has dropout 0.1: it must stay in eval mode
    a = embed(IDS, ATTENTION, SOURCE, NO_DROP)
    b = embed(IDS, ATTENTION, SOURCE, NO_DROP)
    assert torch.equal(a, b) and not a.requires_grad
    assert embed.cacheable and embed.dim == 32


# --------------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------------

def test_token_table_is_the_encoders_frozen_embedding_table(encoder):
    table = kinds.TokenTable(encoder)
    out = table(IDS, ATTENTION, SOURCE, NO_DROP)
    assert torch.equal(out, encoder.shared.weight[IDS])
    assert table.cacheable and table.dim == 32 and not list(table.parameters())
    changed = IDS.clone()
    changed[:, 0] = 2
    assert torch.equal(table(changed, ATTENTION, SOURCE, NO_DROP)[:, 1:], out[:, 1:])  # not contextual


def test_gaussian_table_deterministic_per_seed():
    a, b, c = (kinds.GaussianTable(VOCAB, 8, seed) for seed in (3, 3, 4))
    assert torch.equal(a.table, b.table) and not torch.equal(a.table, c.table)
    assert torch.equal(a.table, torch.randn(VOCAB, 8, generator=torch.Generator().manual_seed(3)))
    assert torch.equal(a(IDS, ATTENTION, SOURCE, NO_DROP), a.table[IDS])
    assert a.cacheable and not list(a.parameters())


def test_build_embedder_each_kind(encoder_dir):
    def build(kind, **kw):
        return kinds.build_embedder(EmbeddingSettings(kind=kind), encoder_dir, VOCAB, **kw)
    assert isinstance(build("encoder"), kinds.ContextualEncoder)
    assert isinstance(build("token_table"), kinds.TokenTable)
    gaussian = build("gaussian", seed=7)
    assert isinstance(gaussian, kinds.GaussianTable) and gaussian.dim == 32
    assert torch.equal(gaussian.table, kinds.GaussianTable(VOCAB, 32, 7).table)
    with pytest.raises(ValueError, match="learned"):  # trained with the flow: elf.train.learned.py
        kinds.build_embedder(EmbeddingSettings(kind="learned"), None, VOCAB, dim=16)
    with pytest.raises(ValueError, match="21"):
        kinds.build_embedder(EmbeddingSettings(kind="encoder"), encoder_dir, VOCAB + 1)
    with pytest.raises(ValueError, match="needs an encoder"):
        kinds.build_embedder(EmbeddingSettings(kind="token_table"), None, VOCAB)


# --------------------------------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------------------------------

EMB = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, -100.0]],
                    [[5.0, 6.0], [7.0, 8.0], [9.0, 10.0]]])  # (2, 3, 2)
VALID = torch.tensor([[1, 1, 0], [1, 1, 1]])  # the (100, -100) token is padding


def test_stats_by_hand():
    stats = normalisation.normalisation_stats(EMB, VALID)
    # valid values: channel 0 = 1, 3, 5, 7, 9; channel 1 = 2, 4, 6, 8, 10; all = 1..10
    assert stats["count"] == 5
    assert torch.allclose(stats["channel_mean"], torch.tensor([5.0, 6.0], dtype=torch.float64))
    assert torch.allclose(stats["channel_std"], torch.full((2,), math.sqrt(8.0), dtype=torch.float64))
    assert stats["scalar_mean"] == pytest.approx(5.5)
    assert stats["scalar_std"] == pytest.approx(math.sqrt(8.25))  # population variance of 1..10


def test_accumulator_over_chunks_equals_direct():
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(10, 7, 5, generator=g) * torch.arange(1.0, 6.0) + 3.0
    mask = torch.rand(10, 7, generator=g) > 0.3
    direct = normalisation.normalisation_stats(emb, mask)
    acc = normalisation.StatsAccumulator()
    for start, stop in [(0, 3), (3, 4), (4, 4), (4, 10)]:  # uneven, including an empty chunk
        acc.update(emb[start:stop], mask[start:stop])
    chunked = acc.result()
    values = emb[mask].double()  # (n, 5): an independent computation
    for stats in (direct, chunked):
        assert stats["count"] == int(mask.sum())
        torch.testing.assert_close(stats["channel_mean"], values.mean(0))
        torch.testing.assert_close(stats["channel_std"], values.std(0, unbiased=False))
        assert stats["scalar_mean"] == pytest.approx(values.mean().item(), rel=1e-12)
        assert stats["scalar_std"] == pytest.approx(values.std(unbiased=False).item(), rel=1e-12)


def test_normalise_modes():
    stats = normalisation.normalisation_stats(EMB, VALID)
    fixed = normalisation.normalise(EMB, None, "fixed", 0.0, 0.2)
    torch.testing.assert_close(fixed, EMB / 0.2)
    scalar = normalisation.normalise(EMB, stats, "scalar")
    torch.testing.assert_close(scalar, (EMB - 5.5) / math.sqrt(8.25))
    per_channel = normalisation.normalise(EMB, stats, "per_channel")
    torch.testing.assert_close(per_channel, (EMB - torch.tensor([5.0, 6.0])) / math.sqrt(8.0))
    assert per_channel.dtype == torch.float32
    # after per-channel normalisation the valid tokens have mean 0 and std 1 in every channel
    again = normalisation.normalisation_stats(per_channel, VALID)
    torch.testing.assert_close(again["channel_mean"], torch.zeros(2, dtype=torch.float64), atol=1e-6, rtol=0)
    torch.testing.assert_close(again["channel_std"], torch.ones(2, dtype=torch.float64))
    torch.testing.assert_close(normalisation.denormalise(per_channel, stats, "per_channel"), EMB)
    with pytest.raises(ValueError, match="needs statistics"):
        normalisation.normalise(EMB, None, "scalar")
