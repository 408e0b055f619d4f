"""The separate decoder of Fig. 5b (elf/decoder.py, elf/stages/decoder.py) and its use in sampling.

Covers: the corruption draws and the loss by hand, overfitting a few sequences from clean embeddings,
the denoiser-only objective (decode_prob 0, no decode head), config validation of runs that name a
decoder, and ``elf decoder`` → ``elf sample --decoder`` end to end on a tiny store, tokenizer and
checkpoint built here.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from elf.cli import main
from elf.config import ConfigError, DatasetSettings, DecoderSettings, EmbeddingSettings, ModelSettings, ObjectiveSettings, RunSettings, SamplerSettings, to_dict
from elf.validate import parse_experiment
from elf.decoder import (DecoderConfig, DecoderDraws, SeparateDecoder, corrupt, decoder_loss,
                         draw_corruption)
from elf.artifacts.records import read_samples
from elf.flow.objective import draw_step, training_step
from elf.train.checkpoint import load_decoder
from elf.train.decoder import cosine_lr
from elf.train.checkpoint import model_meta, save_final
from tests.helpers import tiny_data, tiny_model
from tests.test_store import make_tokens, write_store

L, D, VOCAB = 6, 8, 40


def tiny_decoder(seed=0, **kw) -> SeparateDecoder:
    torch.manual_seed(seed)
    return SeparateDecoder(DecoderConfig(**{**dict(d=D, width=32, layers=1, heads=4, vocab_size=VOCAB,
                                                   max_length=L), **kw}))


# --------------------------------------------------------------------------------------------------
# Maths
# --------------------------------------------------------------------------------------------------

def test_corruption_draws_by_hand():
    draws = draw_corruption((3, 5, 4), 0.2, 0.5, 1.0, torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(7)
    normal, eps, u = torch.randn(3, 5, generator=g), torch.randn(3, 5, 4, generator=g), \
        torch.rand(3, 5, generator=g)
    assert torch.allclose(draws.lam, 1 / (1 + torch.exp(-(0.5 + 1.0 * normal))))
    assert torch.equal(draws.eps, eps) and torch.equal(draws.mask, u < 0.2)
    x = torch.randn(3, 5, 4)
    lam = draws.lam[..., None]
    assert torch.allclose(corrupt(x, draws, 5.0), lam * x + (1 - lam) * 5.0 * eps)
    many = draw_corruption((200, 50, 1), 0.2, 0.5, 1.0, torch.Generator().manual_seed(0))
    assert abs(many.mask.float().mean().item() - 0.2) < 0.01  # 10 000 tokens: SE 0.004
    # median of sigmoid(N(0.5, 1)) is sigmoid(0.5)
    assert abs(many.lam.median().item() - torch.sigmoid(torch.tensor(0.5)).item()) < 0.01


def test_mask_replaces_input_by_the_mask_embedding():
    dec = tiny_decoder().eval()
    x = torch.randn(2, L, D)
    mask = torch.zeros(2, L, dtype=torch.bool)
    mask[0, 1] = mask[1, 4] = True
    by_hand = x.clone()
    by_hand[0, 1] = by_hand[1, 4] = dec.mask_embedding.detach()
    with torch.no_grad():
        assert torch.allclose(dec(x, mask), dec(by_hand), atol=1e-6)
        assert not torch.allclose(dec(x, mask), dec(x), atol=1e-4)


def test_loss_is_masked_mean_cross_entropy_of_corrupted_input():
    dec = tiny_decoder()
    x, ids = torch.randn(2, L, D), torch.randint(0, VOCAB, (2, L))
    draws = draw_corruption((2, L, D), 0.3, 0.5, 1.0, torch.Generator().manual_seed(1))
    valid = torch.ones(2, L)
    valid[1, 3:] = 0
    with torch.no_grad():
        logp = F.log_softmax(dec(corrupt(x, draws, 5.0), draws.mask), -1)
        nll = -logp.gather(-1, ids[..., None]).squeeze(-1)
        expected = (nll * valid).sum() / valid.sum()
        assert torch.allclose(decoder_loss(dec, x, ids, valid, draws, 5.0), expected, atol=1e-6)


def test_cosine_schedule():
    assert cosine_lr(0, 10) == 1.0 and abs(cosine_lr(5, 10) - 0.5) < 1e-12 and cosine_lr(10, 10) == 0.0


def test_decoder_overfits_a_few_sequences_from_clean_embeddings():
    data = tiny_data(n=4, L=12, d=16, vocab=32)
    dec = tiny_decoder(d=16, vocab_size=32, max_length=12)
    clean = DecoderDraws(lam=torch.ones(4, 12), eps=torch.zeros(4, 12, 16),
                         mask=torch.zeros(4, 12, dtype=torch.bool))
    opt = torch.optim.Adam(dec.parameters(), lr=3e-3)
    for _ in range(120):
        loss = decoder_loss(dec, data["x"], data["input_ids"], torch.ones(4, 12), clean, 5.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        accuracy = (dec(data["x"]).argmax(-1) == data["input_ids"]).float().mean().item()
    assert loss.item() < 0.05 and accuracy == 1.0


# --------------------------------------------------------------------------------------------------
# The denoiser-only objective and the config
# --------------------------------------------------------------------------------------------------

def test_objective_without_decode_head_has_zero_ce_and_trains():
    model = tiny_model(0, decode_head=False)
    assert not hasattr(model, "unembed_kernel")
    s = ObjectiveSettings(decode_prob=0.0)
    data = tiny_data(n=6)
    draws = draw_step(tuple(data["x"].shape), s, torch.Generator().manual_seed(0))
    assert draws.decode_row.sum() == 0
    out = training_step(model, data, draws, s)
    out.loss.backward()
    ce_sum, l2_sum, ce_count, l2_count = out.sums.tolist()
    assert ce_sum == 0 and ce_count == 0 and out.ce_loss.item() == 0
    assert l2_count == data["attention_mask"].sum().item()
    assert torch.allclose(out.loss, out.parts["l2_per_token"].mean())
    assert model.final_layer.linear.weight.grad.abs().sum() > 0


def _config(**run):
    return dict(datasets={"owt": dict(task="unconditional", source="embedded", name="owt")},
                embeddings={"encoder": {}, "other": {}},
                decoders={"sep": dict(dataset="owt", embedding="encoder")},
                run_defaults={"dataset": "owt"}, runs={"separate": run})


def test_config_checks_runs_that_name_a_decoder():
    ok = dict(decoder="sep", model={"decode_head": False}, objective={"decode_prob": 0.0})
    exp = parse_experiment(_config(**ok))
    assert exp.run("separate").decoder == "sep" and exp.decoders["sep"].mask_prob == 0.2
    assert exp.decoders["sep"].noise_scale == 5.0 and exp.decoders["sep"].lr == 3e-4
    for bad, words in [(dict(ok, decoder="nope"), "not defined"),
                       (dict(ok, model={"decode_head": True}), "decode_head"),
                       (dict(ok, objective={"decode_prob": 0.2}), "decode_prob"),
                       (dict(ok, embedding="other"), "trained on embedding")]:
        with pytest.raises(ConfigError, match=words):
            parse_experiment(_config(**bad))
    broken = _config(**ok)
    broken["decoders"]["sep"]["dataset"] = "wmt"
    with pytest.raises(ConfigError, match="decoders.sep.dataset"):
        parse_experiment(broken)


# --------------------------------------------------------------------------------------------------
# Stages: elf decoder, then elf sample --decoder
# --------------------------------------------------------------------------------------------------

EMB = EmbeddingSettings(kind="encoder", normalization="scalar", dtype="float32")
DATASET = DatasetSettings(task="unconditional", source="embedded", name="toy", max_length=L)
SAMPLER = dict(method="ode", steps=3, sc_cfg=1.0)


def build_tokenizer(path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(path)


def build_checkpoint(path, decoder="sep"):
    """A denoiser-only tiny ELF whose run names the separate decoder (non-zero denoise head)."""
    model = tiny_model(0, decode_head=False, d=D, max_length=L, vocab_size=VOCAB)
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for p in model.final_layer.linear.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    run = RunSettings(dataset="toy", decoder=decoder, model=ModelSettings(decode_head=False),
                      objective=ObjectiveSettings(decode_prob=0.0))
    meta = model_meta(model.cfg, run=to_dict(run), dataset=to_dict(DATASET), embedding=to_dict(EMB))
    save_final(path, model.state_dict(), model.state_dict(), meta)
    return model


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoder_assets")
    write_store(root / "train.zarr", make_tokens(n=16, length=L, seed=1), dtype="float32")
    build_tokenizer(root / "tok")
    settings = dict(decoder=to_dict(DecoderSettings(dataset="toy", layers=1, width=32, heads=4,
                                                    steps=40, batch_size=8, lr=3e-3, seed=3)),
                    dataset=to_dict(DATASET), embedding=to_dict(EMB))
    args = ["decoder", "--settings", json.dumps(settings), "--store", str(root / "train.zarr"),
            "--tokenizer", str(root / "tok"), "--out", str(root / "sep"), "--no-progress"]
    assert main(args) == 0
    build_checkpoint(root / "run")
    return root, args


def test_decoder_stage_writes_a_seeded_decoder_that_learns(assets, tmp_path):
    root, args = assets
    assert sorted(p.name for p in (root / "sep").iterdir()) == ["checksums.json", "config.json",
                                                                 "model.safetensors"]
    decoder, meta = load_decoder(root / "sep")
    assert meta["decoder"] == dict(d=D, width=32, layers=1, heads=4, vocab_size=VOCAB, max_length=L,
                                   rope_theta=10000.0, norm_eps=1e-6)
    assert meta["embedding"] == to_dict(EMB) and len(meta["losses"]) == 40
    assert sum(meta["losses"][-5:]) < sum(meta["losses"][:5])
    again = args[:-2] + [str(tmp_path / "again"), "--no-progress"]
    assert main(again) == 0
    assert json.loads((tmp_path / "again" / "config.json").read_text())["losses"] == meta["losses"]


def sample(root, out, *extra):
    return main(["sample", "--checkpoint", str(root / "run"), "--sampler", json.dumps(SAMPLER),
                 "--seed", "0", "--n", "3", "--batch-size", "3", "--tokenizer", str(root / "tok"),
                 "--out", str(out), "--no-progress", *extra])


def test_sampling_decodes_with_the_separate_decoder(assets, tmp_path):
    from elf.flow.samplers import postprocess, rollout
    from elf.flow.sampling import batch_generator
    from elf.train.checkpoint import load_model

    root, _ = assets
    assert sample(root, tmp_path / "s.jsonl", "--decoder", str(root / "sep")) == 0
    header, rows = read_samples(tmp_path / "s.jsonl")
    assert len(rows) == 3 and header["decoder_sha256"] and header["decoder"] == str(root / "sep")
    # independently: the same noise and rollout, then argmax of the separate decoder on z
    model, _ = load_model(root / "run")
    decoder, _ = load_decoder(root / "sep")
    s, g = SamplerSettings(**SAMPLER), batch_generator(0, 0)
    with torch.no_grad():
        z, _ = rollout(model, s, s.noise_scale * torch.randn(3, L, D, generator=g), g)
        ids = postprocess(decoder(z).argmax(-1), 1, 0)
    expected = [[t for t in row if t != 0] for row in ids.tolist()]
    assert [row["token_ids"] for row in rows] == expected


def test_sampling_refuses_a_missing_or_mismatched_decoder(assets, tmp_path, capsys):
    root, _ = assets
    assert sample(root, tmp_path / "a.jsonl") == 2
    assert "pass --decoder" in capsys.readouterr().err
    other = tmp_path / "other"
    other.mkdir()
    for name in ("model.safetensors", "config.json", "checksums.json"):
        (other / name).write_bytes((root / "sep" / name).read_bytes())
    meta = json.loads((other / "config.json").read_text())
    meta["embedding"]["normalization"] = "fixed"
    (other / "config.json").write_text(json.dumps(meta))
    assert sample(root, tmp_path / "b.jsonl", "--decoder", str(other)) == 2
    assert "trained on embedding" in capsys.readouterr().err
    assert not (tmp_path / "a.jsonl").exists() and not (tmp_path / "b.jsonl").exists()
