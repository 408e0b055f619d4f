"""The training loop: overfitting, exact resume, gradient accumulation and DDP equivalence."""

import dataclasses
import json
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from elf.train.loop import CrashForTest, train
from tests.helpers import TensorBatches, tiny_data, tiny_model, tiny_run


def _train(tmp, steps, data, *, crash=None, model=None, lr=1e-3, **budget):
    model = model or tiny_model()
    run = tiny_run(steps, lr=lr, **budget)
    meta = {"model": dataclasses.asdict(model.cfg), "steps": steps}
    train(model, run, TensorBatches(data, run.budget.batch_size // run.budget.grad_accum), tmp, meta,
          loss_covers_padding=False, seq_shape=(12, 16), progress=False, crash_after_step=crash)
    return model


def _log(path):
    return [json.loads(line) for line in open(path / "train_log.jsonl")]


def _denoise_error(model, data):
    """Mean ‖x̂ − x‖² per dim at fixed t ∈ {0.3, 0.5, 0.7} and fixed noise (no self-cond)."""
    g = torch.Generator().manual_seed(123)
    x = data["x"]
    errors = []
    with torch.no_grad():
        for t in (0.3, 0.5, 0.7):
            z = t * x + (1 - t) * 2.0 * torch.randn(x.shape, generator=g)
            tt = torch.full((len(x),), t)
            x_hat, _ = model(torch.cat([z, torch.zeros_like(z)], -1), tt, torch.ones(len(x)))
            errors.append((x_hat - x).pow(2).mean())
    return torch.stack(errors).mean().item()


def test_tiny_model_overfits_a_handful_of_sequences(tmp_path):
    data = tiny_data(2)
    untrained = _denoise_error(tiny_model(), data)
    model = _train(tmp_path, 600, data, batch_size=8, lr=1e-2)
    model.eval()
    assert _denoise_error(model, data) < untrained / 10
    with torch.no_grad():  # decode from clean embeddings at t = 1, mode on
        ones = torch.ones(2)
        _, h = model(torch.cat([data["x"], torch.zeros_like(data["x"])], -1), ones, ones, ones)
        accuracy = (model.decode(h).argmax(-1) == data["input_ids"]).float().mean().item()
    assert accuracy >= 0.99


def test_killed_and_resumed_run_is_bitwise_identical(tmp_path):
    data = tiny_data(8)
    _train(tmp_path / "full", 7, data, checkpoint_every=3)
    with pytest.raises(CrashForTest):  # dies after step 5; the last checkpoint is step 3
        _train(tmp_path / "resumed", 7, data, checkpoint_every=3, crash=5)
    assert (tmp_path / "resumed" / "resume" / "state.pt").exists()
    _train(tmp_path / "resumed", 7, data, checkpoint_every=3)
    assert not (tmp_path / "resumed" / "resume").exists()
    for name in ("model.safetensors", "ema.safetensors"):
        full, resumed = load_file(tmp_path / "full" / name), load_file(tmp_path / "resumed" / name)
        for key in full:
            assert torch.equal(full[key], resumed[key]), (name, key)
    assert _log(tmp_path / "full") == [
        {**r, "tokens_per_s": f["tokens_per_s"]} for r, f in
        zip(_log(tmp_path / "resumed"), _log(tmp_path / "full"))]


def _assert_same_run(full, resumed):
    for name in ("model.safetensors", "ema.safetensors"):
        a, b = load_file(full / name), load_file(resumed / name)
        assert all(torch.equal(a[key], b[key]) for key in a), name
    assert [{**r, "tokens_per_s": 0} for r in _log(resumed)] == \
        [{**r, "tokens_per_s": 0} for r in _log(full)]


def test_a_torn_log_line_is_dropped_with_a_warning_and_the_resume_is_exact(tmp_path):
    data = tiny_data(8)
    _train(tmp_path / "full", 7, data, checkpoint_every=3)
    with pytest.raises(CrashForTest):
        _train(tmp_path / "resumed", 7, data, checkpoint_every=3, crash=5)
    with open(tmp_path / "resumed" / "train_log.jsonl", "ab") as fh:
        fh.write(b'{"step": 6, "loss": 0.3\xff')  # a write cut by the kill (and not UTF-8)
    with pytest.warns(RuntimeWarning, match="train_log.jsonl: dropping 1 cut"):
        _train(tmp_path / "resumed", 7, data, checkpoint_every=3)
    _assert_same_run(tmp_path / "full", tmp_path / "resumed")


@pytest.mark.parametrize("damaged, resumes_from", [(("state.pt",), "state.prev.pt"),
                                                   (("state.pt", "state.prev.pt"), "scratch")])
def test_a_truncated_resume_state_falls_back_with_a_warning(tmp_path, damaged, resumes_from):
    """Killed after step 5 with states at steps 2 (kept as state.prev.pt) and 4: a torn state.pt
    resumes from step 2, two torn states from scratch; either way the run ends as an uninterrupted
    one, where an unreadable state used to crash every retry."""
    data = tiny_data(8)
    _train(tmp_path / "full", 7, data, checkpoint_every=2)
    with pytest.raises(CrashForTest):
        _train(tmp_path / "resumed", 7, data, checkpoint_every=2, crash=5)
    resume = tmp_path / "resumed" / "resume"
    assert torch.load(resume / "state.prev.pt", weights_only=True)["step"] == 2
    for name in damaged:
        (resume / name).write_bytes((resume / name).read_bytes()[:200])
    expected = "no readable resume state" if resumes_from == "scratch" else "state.pt is unreadable"
    with pytest.warns(RuntimeWarning, match=expected):
        _train(tmp_path / "resumed", 7, data, checkpoint_every=2)
    _assert_same_run(tmp_path / "full", tmp_path / "resumed")


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    data = tiny_data(8)
    one = _log_of(tmp_path / "one", data, grad_accum=1)
    two = _log_of(tmp_path / "two", data, grad_accum=2)
    for a, b in zip(one, two):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)


def _log_of(path, data, **budget):
    _train(path, 3, data, **budget)
    return _log(path)


def _ddp_worker(rank, world_size, port, out, data):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world_size)
    model = tiny_model()
    run = tiny_run(3)
    meta = {"model": dataclasses.asdict(model.cfg)}
    train(model, run, TensorBatches(data, 8, rank=rank, world_size=world_size), out, meta,
          loss_covers_padding=False, seq_shape=(12, 16), rank=rank, world_size=world_size,
          progress=False)
    torch.distributed.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ddp_two_processes_match_one_process(tmp_path):
    data = tiny_data(8)
    single = _log_of(tmp_path / "single", data)
    mp.spawn(_ddp_worker, args=(2, _free_port(), tmp_path / "ddp", data), nprocs=2, join=True)
    ddp = _log(tmp_path / "ddp")
    assert len(ddp) == len(single) == 3
    for a, b in zip(single, ddp):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
    ema_1, ema_2 = load_file(tmp_path / "single" / "ema.safetensors"), load_file(tmp_path / "ddp" / "ema.safetensors")
    for key in ema_1:
        torch.testing.assert_close(ema_1[key], ema_2[key], rtol=1e-5, atol=1e-6)
