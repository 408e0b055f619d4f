"""Tests of elf.embed.encoder and the ``elf encoder`` stage: span corruption, training, saving/loading,
pairing checks and the conditional 4-D attention mask (spec §2). Tiny models only; no network."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import AutoTokenizer, PreTrainedTokenizerFast, T5Config, T5EncoderModel

from elf.config import EncoderSettings, from_dict, to_dict
from elf.embed import encoder as enc
from elf.stages import encoder as encoder_stage
from tests.fixtures_util import load_fixture

WORDS = ["the", "cat", "dog", "sat", "on", "mat", "a", "ran", "far", "big", "red", "sun"]
SETTINGS = EncoderSettings(d_model=32, layers=1, heads=2, d_ff=64, steps=30, batch_size=8, lr=3e-3,
                           seed=0)


def make_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    model = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    model.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=model, pad_token="<pad>", eos_token="</s>",
                                   unk_token="<unk>")


def make_corpus(n_rows: int = 48, length: int = 24, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Sentences from two templates, EOS after each, packed; the last 4 rows end in padding."""
    g = torch.Generator().manual_seed(seed)
    templates = [[3, 4, 6, 5, 3, 8], [9, 12, 13, 10, 11]]  # "the cat sat on the mat", "a big red ran far"
    stream: list[int] = []
    while len(stream) < n_rows * length:
        stream += templates[int(torch.randint(0, 2, (1,), generator=g))] + [enc.EOS_ID]
    ids = torch.tensor(stream[: n_rows * length]).view(n_rows, length)
    mask = torch.ones_like(ids)
    ids[-4:, -5:] = enc.PAD_ID
    mask[-4:, -5:] = 0
    return ids, mask


def tiny_encoder(vocab: int = 20, pad: int = 0, eos: int = 1) -> T5EncoderModel:
    torch.manual_seed(0)
    config = T5Config(vocab_size=vocab, d_model=16, d_kv=8, num_heads=2, d_ff=32, num_layers=1,
                      dropout_rate=0.0, pad_token_id=pad, eos_token_id=eos)
    return T5EncoderModel(config).eval()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run far faster single-threaded, above all when other processes share the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def batches_of(ids: torch.Tensor, mask: torch.Tensor, settings: EncoderSettings = SETTINGS):
    """The stage's batches over in-memory rows: a seeded permutation per epoch (elf.embed.reader)."""
    from elf.embed.reader import OnTheFlySource, ShuffledBatches
    columns = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
               "cond_seq_mask": np.zeros_like(ids.numpy())}
    return ShuffledBatches(OnTheFlySource(columns, None, dim=settings.d_model), settings.batch_size,
                           seed=settings.seed, prefetch=0,
                           transform=enc.SpanCorruptor(settings.seed, enc.sentinel_ids(len(WORDS) + 3)))


@pytest.fixture(scope="module")
def trained():
    ids, mask = make_corpus()
    model, losses = enc.train_span_corruption(SETTINGS, make_tokenizer(), batches_of(ids, mask),
                                              progress=False)
    return model, losses


# --------------------------------------------------------------------------------------------------
# span corruption
# --------------------------------------------------------------------------------------------------

def _reconstruct(inputs: torch.Tensor, labels: torch.Tensor, sentinels: list[int]) -> list[int]:
    """Undo span corruption: replace each sentinel in the input by the tokens after it in the labels."""
    label_list = [t for t in labels.tolist() if t != enc.IGNORE_INDEX]
    assert label_list[-1] == enc.EOS_ID
    spans, current = {}, None
    for token in label_list[:-1]:
        if token in sentinels:
            current = token
            spans[current] = []
        else:
            spans[current].append(token)
    out = []
    for token in inputs.tolist():
        if token == enc.PAD_ID:
            break
        out += spans[token] if token in sentinels else [token]
    return out


def test_span_corruption_is_invertible_and_masks_t5_amounts():
    ids = torch.randint(3, 15, (6, 40), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 30:] = 0  # a padded row: 30 real tokens
    sentinels = enc.sentinel_ids(15, 10)
    inputs, labels = enc.span_corruption(ids, mask, torch.Generator().manual_seed(0),
                                         sentinel_ids=sentinels)
    for row in range(6):
        n_real = int(mask[row].sum())
        assert _reconstruct(inputs[row], labels[row], sentinels) == ids[row, :n_real].tolist()
        label_tokens = [t for t in labels[row].tolist() if t != enc.IGNORE_INDEX]
        n_spans = sum(t in sentinels for t in label_tokens)
        n_noise = len(label_tokens) - n_spans - 1  # minus sentinels and EOS
        assert n_noise == round(0.15 * n_real)  # 6 of 40, 4 (4.5 rounds to even) of 30
        assert n_spans == max(1, round(n_noise / 3.0))
        # sentinels are used from the top id down, in order of appearance
        assert [t for t in label_tokens if t in sentinels] == sentinels[:n_spans]
        assert inputs[row].tolist().count(sentinels[0]) == 1


def test_sentinels_are_top_ids_of_enlarged_vocab():
    assert enc.sentinel_ids(15, 3) == [17, 16, 15]


def test_span_corruption_deterministic_given_generator():
    ids = torch.randint(3, 15, (4, 32), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    sentinels = enc.sentinel_ids(15)
    a = enc.span_corruption(ids, mask, torch.Generator().manual_seed(5), sentinel_ids=sentinels)
    b = enc.span_corruption(ids, mask, torch.Generator().manual_seed(5), sentinel_ids=sentinels)
    c = enc.span_corruption(ids, mask, torch.Generator().manual_seed(6), sentinel_ids=sentinels)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not (a[0].shape == c[0].shape and torch.equal(a[0], c[0]))


# --------------------------------------------------------------------------------------------------
# training, saving, loading
# --------------------------------------------------------------------------------------------------

def test_build_t5_conventions():
    model = enc.build_t5(SETTINGS, 115)
    assert (model.config.pad_token_id, model.config.eos_token_id,
            model.config.decoder_start_token_id) == (0, 1, 0)
    assert model.get_input_embeddings().num_embeddings == 115
    assert model.config.d_kv * model.config.num_heads == 32


def test_span_corruption_loss_falls(trained):
    _, losses = trained
    assert len(losses) == SETTINGS.steps
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.7 * first, (first, last)


def test_encoder_part_matches_t5_encoder_and_reloads_identically(trained, tmp_path):
    model, _ = trained
    encoder = enc.encoder_part(model)
    ids, mask = make_corpus(n_rows=3)
    with torch.no_grad():
        expected = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        got = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        encoder.save_pretrained(tmp_path)
        reloaded = T5EncoderModel.from_pretrained(tmp_path)
        assert torch.equal(reloaded(input_ids=ids, attention_mask=mask).last_hidden_state, got)
    frozen = enc.load_encoder(str(tmp_path))
    assert not frozen.training and not any(p.requires_grad for p in frozen.parameters())


def _write_tokens(path: Path) -> None:
    import datasets
    ids, mask = make_corpus()
    columns = {"input_ids": ids.tolist(), "attention_mask": mask.tolist(),
               "cond_seq_mask": torch.zeros_like(ids).tolist()}
    datasets.DatasetDict({split: datasets.Dataset.from_dict(columns)
                          for split in ("train", "validation", "test")}).save_to_disk(str(path))


def _run_stage(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    encoder_stage.register(parser.add_subparsers(dest="stage"))
    args = parser.parse_args(argv)
    args.func(args)


def test_stage_writes_loadable_encoder_equal_to_in_process_training(tmp_path):
    tokenizer_dir, tokens_dir, out = tmp_path / "tok", tmp_path / "tokens", tmp_path / "enc"
    make_tokenizer().save_pretrained(tokenizer_dir)
    _write_tokens(tokens_dir)
    settings = {**to_dict(SETTINGS), "steps": 5}
    _run_stage(["encoder", "--settings", json.dumps(settings), "--tokenizer", str(tokenizer_dir),
                "--tokens", str(tokens_dir), "--out", str(out), "--no-progress"])

    prov = json.loads((out / "provenance.json").read_text())
    assert prov["settings"] == settings and prov["tokenizer"] == str(tokenizer_dir)
    assert isinstance(prov["final_loss"], float)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left

    tokenizer = AutoTokenizer.from_pretrained(out)
    loaded = enc.load_encoder(str(out))
    enc.check_pairing(tokenizer, loaded)
    assert loaded.get_input_embeddings().num_embeddings == len(tokenizer) + enc.N_SENTINELS

    ids, mask = make_corpus()
    direct_settings = from_dict(EncoderSettings, settings)
    direct = enc.train_encoder(direct_settings, make_tokenizer(), batches_of(ids, mask, direct_settings),
                               progress=False)
    probe = ids[:2]
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=probe).last_hidden_state,
                           direct(input_ids=probe).last_hidden_state)


def test_stage_rejects_bad_inputs(tmp_path):
    from elf.cli import ElfError
    tokenizer_dir = tmp_path / "tok"
    make_tokenizer().save_pretrained(tokenizer_dir)
    with pytest.raises(ElfError, match="encoder.d_model"):
        _run_stage(["encoder", "--settings", '{"d_model": "wide"}', "--tokenizer", str(tokenizer_dir),
                    "--tokens", str(tmp_path), "--out", str(tmp_path / "o")])
    with pytest.raises(ElfError, match="--tokens"):
        _run_stage(["encoder", "--settings", "{}", "--tokenizer", str(tokenizer_dir),
                    "--tokens", str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------------------------------
# R06's schedule, epochs, resume and precision
# --------------------------------------------------------------------------------------------------

def test_encoder_lr_warms_up_linearly_then_decays_on_a_cosine():
    settings = EncoderSettings(steps=10, warmup_steps=4, lr=1e-3)
    # i = step - 1: i/4 for i < 4; then (1 + cos(pi (i - 4) / 6)) / 2: 1, (1 + sqrt(3)/2)/2, 3/4, 1/2, ...
    expected = [0.0, 0.25, 0.5, 0.75, 1.0, 0.9330127, 0.75, 0.5, 0.25, 0.0669873]
    got = [enc.encoder_lr(k, settings) / 1e-3 for k in range(1, 11)]
    assert got == pytest.approx(expected, abs=1e-7)
    no_warmup = EncoderSettings(steps=4, warmup_steps=0, lr=2.0)
    assert [enc.encoder_lr(k, no_warmup) for k in range(1, 5)] == pytest.approx(
        [2.0, 1.0 + 2 ** -0.5, 1.0, 1.0 - 2 ** -0.5])
    with pytest.raises(ValueError, match="warmup_steps 10 must be fewer"):
        enc.encoder_lr(1, EncoderSettings(steps=10, warmup_steps=10))
    with pytest.raises(ValueError, match="1..10"):
        enc.encoder_lr(11, settings)


class Recording:
    """A batch source that remembers the rows and the lr of every batch the trainer took."""

    def __init__(self, batches):
        self.batches, self.rows = batches, []

    def __iter__(self):
        return self

    def __next__(self):
        batch = next(self.batches)
        self.rows.append(batch["index"].tolist())
        return batch

    def state_dict(self):
        return self.batches.state_dict()

    def load_state_dict(self, state):
        self.batches.load_state_dict(state)


def test_training_visits_every_row_once_per_epoch_in_a_seeded_order():
    ids, mask = make_corpus()  # 48 rows, batch 8: 6 steps an epoch
    settings = dataclasses.replace(SETTINGS, steps=12)
    orders = {}
    for seed in (0, 0, 1):
        recorded = Recording(batches_of(ids, mask, dataclasses.replace(settings, seed=seed)))
        enc.train_span_corruption(dataclasses.replace(settings, seed=seed), make_tokenizer(), recorded,
                                  progress=False)
        epochs = [sum(recorded.rows[e * 6:(e + 1) * 6], []) for e in range(2)]
        assert all(sorted(epoch) == list(range(48)) for epoch in epochs)  # each row once per epoch
        assert epochs[0] != epochs[1]  # a new permutation each epoch
        assert orders.setdefault(seed, epochs) == epochs  # the same seed, the same order
    assert orders[0] != orders[1]


def _stage_inputs(tmp_path: Path) -> tuple[Path, Path]:
    tokenizer_dir, tokens_dir = tmp_path / "tok", tmp_path / "tokens"
    make_tokenizer().save_pretrained(tokenizer_dir)
    _write_tokens(tokens_dir)
    return tokenizer_dir, tokens_dir


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return enc.load_encoder(str(folder)).state_dict()


def test_killed_build_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path):
    from elf.train.loop import CrashForTest
    tokenizer_dir, tokens_dir = _stage_inputs(tmp_path)
    settings = dataclasses.replace(SETTINGS, steps=10, warmup_steps=3, checkpoint_every=3)
    build = dict(tokenizer_ref=str(tokenizer_dir), tokens=str(tokens_dir), progress=False,
                 device_name="cpu")
    encoder_stage.make_encoder(settings, out=tmp_path / "whole", **build)

    killed = tmp_path / "killed"
    with pytest.raises(CrashForTest):
        encoder_stage.make_encoder(settings, out=killed, crash_after_step=8, **build)
    assert not killed.exists() and (tmp_path / "killed.partial/resume/state.pt").exists()
    encoder_stage.make_encoder(settings, out=killed, **build)
    prov = json.loads((killed / "provenance.json").read_text())
    assert prov["resumed_from_step"] == 6  # the checkpoint of step 6; steps 7-8 were lost and redone
    whole, resumed = _weights(tmp_path / "whole"), _weights(killed)
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
    assert prov["losses"] == json.loads((tmp_path / "whole/provenance.json").read_text())["losses"]
    assert not (tmp_path / "killed.partial").exists()  # the resume state goes once the folder is written
    assert prov["epochs"] == pytest.approx(10 / 6) and prov["batches_per_epoch"] == 6

    other = tmp_path / "other"  # a state made for other settings is not resumed
    with pytest.raises(CrashForTest):
        encoder_stage.make_encoder(settings, out=other, crash_after_step=4, **build)
    encoder_stage.make_encoder(dataclasses.replace(settings, lr=1e-3), out=other, **build)
    assert json.loads((other / "provenance.json").read_text())["resumed_from_step"] == 0


def test_build_runs_under_the_precision_policy(tmp_path):
    tokenizer_dir, tokens_dir = _stage_inputs(tmp_path)
    settings = dataclasses.replace(SETTINGS, steps=3)
    for precision in ("fp32", "bf16"):
        encoder_stage.make_encoder(settings, tokenizer_ref=str(tokenizer_dir), tokens=str(tokens_dir),
                                   out=tmp_path / precision, progress=False, device_name="cpu",
                                   precision=precision)
        prov = json.loads((tmp_path / precision / "provenance.json").read_text())
        assert prov["precision"] == precision and prov["device"] == "cpu"
    fp32, bf16 = _weights(tmp_path / "fp32"), _weights(tmp_path / "bf16")
    assert all(v.dtype == torch.float32 for v in bf16.values())  # autocast: the weights stay float32
    assert not all(torch.equal(fp32[k], bf16[k]) for k in fp32)  # but the forward ran in bf16


# --------------------------------------------------------------------------------------------------
# pairing
# --------------------------------------------------------------------------------------------------

def test_check_pairing_accepts_matching_pair():
    enc.check_pairing(make_tokenizer(), tiny_encoder(vocab=15))


def test_check_pairing_refuses_small_vocab_and_wrong_special_ids():
    with pytest.raises(ValueError, match=r"tokenizer .* and encoder .*15 ids .* 10 embedding rows"):
        enc.check_pairing(make_tokenizer(), tiny_encoder(vocab=10))
    with pytest.raises(ValueError, match=r"pad id 0 \(tokenizer\) != 3 \(encoder\)"):
        enc.check_pairing(make_tokenizer(), tiny_encoder(pad=3))
    with pytest.raises(ValueError, match=r"eos id 1 \(tokenizer\) != 2 \(encoder\)"):
        enc.check_pairing(make_tokenizer(), tiny_encoder(eos=2))


# --------------------------------------------------------------------------------------------------
# 4-D conditional mask
# --------------------------------------------------------------------------------------------------

def test_encoder_mask_4d_hand_written():
    attention = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    source = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0]])
    drop = torch.tensor([False, True])
    allowed = torch.tensor([
        # row 0: source {0}, target {1, 2}, padding {3}; source visible to target
        [[1, 0, 0, 0],   # source row: source columns only
         [1, 1, 1, 0],   # target rows: every valid column
         [1, 1, 1, 0],
         [1, 1, 1, 0]],  # padding row: like a target row (released code)
        # row 1: source {0, 1}, target {2, 3}, source dropped
        [[1, 1, 0, 0],
         [1, 1, 0, 0],
         [0, 0, 1, 1],   # target rows may not see the source
         [0, 0, 1, 1]],
    ], dtype=torch.bool)
    mask = enc.encoder_mask_4d(attention, source, drop, torch.float32)
    assert mask.shape == (2, 1, 4, 4) and mask.dtype == torch.float32
    minimum = torch.finfo(torch.float32).min
    expected = torch.where(allowed, torch.tensor(0.0), torch.tensor(minimum))
    assert torch.equal(mask[:, 0], expected)


def test_encoder_mask_4d_never_masks_a_whole_row():
    attention = torch.tensor([[0, 0, 0], [1, 1, 0]])
    source = torch.tensor([[0, 0, 0], [1, 1, 0]])  # row 1: dropped source, no target tokens
    mask = enc.encoder_mask_4d(attention, source, torch.tensor([False, True]), torch.float16)
    allowed = mask[:, 0] == 0
    assert allowed.any(-1).all()
    assert torch.equal(allowed[0], torch.eye(3, dtype=torch.bool))  # all padding: self only
    assert allowed[1, 2].tolist() == [False, False, True]


@pytest.mark.parametrize("name", ["train_step_cond.pt", "train_step_uncond.pt"])
def test_encoder_mask_4d_matches_released_code_fixture(name):
    fixture = load_fixture(name)
    batch = fixture["batch"]
    drop = fixture["draws"].get("label_drop")
    mask = enc.encoder_mask_4d(batch["attention_mask"], batch["cond_seq_mask"], drop, torch.float32)
    assert torch.equal(mask[:, 0] == 0, batch["encoder_attention_mask"])
