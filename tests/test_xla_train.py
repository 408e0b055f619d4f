"""Training on the XLA device (torch_xla, XLA CPU backend): one step equal to the CPU step on the
authors' fixtures, a short run equal to the CPU run that compiles once per step structure, exact
resume after a crash and after a kill, and data parallel (SPMD) over two XLA CPU devices
(``CPU_NUM_DEVICES=2``, in a process of its own) equal to the CPU run. Skipped without torch_xla
(tests/xla_util.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.xla_util import DEVICE, compiles, fallbacks, on_cpu_then_xla  # noqa: I001 (skips the module first)

from elf.config import OptimSettings
from elf.device import is_xla, sync, to_cpu
from elf.flow.objective import training_step
from elf.train.loop import CrashForTest
from elf.train.optim import EMA, build_optimizer, clip_grad_norm
from tests.fixtures_util import fixture_model, load_fixture
from tests.test_fixtures_flow import fixture_inputs
from tests.xla_worker import decode_rows_per_step, tiny_xla_run, train_tiny

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("xla_worker.py")

# XLA's CPU backend fuses and orders float32 reductions differently from eager PyTorch. Measured on
# the two fixtures (torch 2.9 / torch_xla 2.9): loss within 1.1e-7 relative, gradients within 1.1e-6
# absolute, weights after the step within 2.3e-6 (Nesterov-Adam's first step, ~lr·sign(g), amplifies
# the rounding of near-zero gradients), EMA within 1.5e-8. The tolerances leave about 2x of margin.
STEP_TOL = dict(loss_rel=1e-6, grad=dict(rtol=0, atol=2e-6), param=dict(rtol=0, atol=5e-6),
                ema=dict(rtol=0, atol=5e-8))


def fixture_step(name: str, device):
    """One whole training step (objective → backward → clip → Muon/Nesterov-Adam → EMA) of a
    fixture on ``device``; static shapes on XLA. Returns (fx, loss, grads, params, ema) on the CPU."""
    fx = load_fixture(name)
    obj, opt_cfg = fx["config"]["objective"], fx["config"]["optimizer"]
    batch, draws, settings = fixture_inputs(fx)
    draws = draws.to(device)
    model = fixture_model(fx).to(device)
    ema = EMA(model, opt_cfg["ema_decay"])
    optimizer = build_optimizer(model.named_parameters(), OptimSettings(), lr=opt_cfg["lr"])
    out = training_step(model, {k: v.to(device) for k, v in batch.items()}, draws, settings,
                        loss_covers_padding=obj["loss_covers_padding"], static_shapes=is_xla(device))
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    clip_grad_norm(model.parameters(), opt_cfg["grad_clip_max_norm"])
    optimizer.step()
    ema.update(model)
    sync(device)
    params = {n: p.detach() for n, p in model.named_parameters()}
    return fx, out.loss.detach().cpu(), to_cpu(grads), to_cpu(params), to_cpu(ema.shadow)


@pytest.mark.parametrize("name", ["train_step_uncond.pt", "train_step_cond.pt"])
def test_one_training_step_on_xla_equals_the_cpu_step(name):
    (fx, loss_cpu, grads_cpu, params_cpu, ema_cpu), (_, loss, grads, params, ema) = \
        on_cpu_then_xla(fixture_step, name)
    assert loss.item() == pytest.approx(loss_cpu.item(), rel=STEP_TOL["loss_rel"])
    assert loss.item() == pytest.approx(fx["expected"]["loss"], rel=1e-5)
    for pname in params_cpu:
        torch.testing.assert_close(grads[pname], grads_cpu[pname], **STEP_TOL["grad"], msg=pname)
        torch.testing.assert_close(params[pname], params_cpu[pname], **STEP_TOL["param"], msg=pname)
        torch.testing.assert_close(ema[pname], ema_cpu[pname], **STEP_TOL["ema"], msg=pname)
        # and the authors' numbers, at the CPU parity test's tolerance (tests/test_fixtures_step.py)
        torch.testing.assert_close(params[pname], fx["expected"]["params_after"][pname],
                                   rtol=1e-5, atol=2e-5, msg=pname)


def _log(path):
    return [json.loads(line) for line in (Path(path) / "train_log.jsonl").read_text().splitlines()]


def _counting(seen: dict):
    def monitor(step, ema):
        seen[step] = compiles()
        return {}
    return monitor


def test_a_short_run_equals_the_cpu_run_and_compiles_once_per_step_structure(tmp_path):
    """8 steps with lr warm-up (step 1 at lr 0: Muon skipped) and EMA warm-up (a weight per step):
    step 1 and step 2 each compile a graph (no optimiser state yet, then the steady step); steps 3-8
    reuse the second, so the count must not grow after step 2."""
    assert min(decode_rows_per_step(tiny_xla_run())) > 0
    train_tiny(tmp_path / "cpu", "cpu")
    seen = {}
    start, before = compiles(), fallbacks()
    train_tiny(tmp_path / "xla", DEVICE, monitor=_counting(seen))
    assert fallbacks() == before, "an op of the loop ran on the host"
    counts = [seen[k] - start for k in sorted(seen)]
    print(f"XLA compilations after each of steps 1-8: {counts}")
    assert counts[1] == counts[-1], f"compilations grew after step 2: {counts}"
    assert counts[-1] <= 2, counts
    for cpu, xla in zip(_log(tmp_path / "cpu"), _log(tmp_path / "xla")):
        assert xla["loss"] == pytest.approx(cpu["loss"], rel=1e-4), cpu["step"]
        assert xla["grad_norm"] == pytest.approx(cpu["grad_norm"], rel=1e-3), cpu["step"]
    ema_cpu, ema_xla = (load_file(tmp_path / d / "ema.safetensors") for d in ("cpu", "xla"))
    for key in ema_cpu:
        torch.testing.assert_close(ema_xla[key], ema_cpu[key], rtol=1e-4, atol=1e-5, msg=key)


def test_a_crashed_xla_run_resumes_to_the_uninterrupted_weights(tmp_path):
    run = tiny_xla_run(checkpoint_every=3)
    train_tiny(tmp_path / "full", DEVICE, run)
    with pytest.raises(CrashForTest):
        train_tiny(tmp_path / "resumed", DEVICE, run, crash=5)
    state = torch.load(tmp_path / "resumed" / "resume" / "state.pt", weights_only=True)
    assert state["step"] == 3 and state["model"]["text_proj.proj2.weight"].device.type == "cpu"
    train_tiny(tmp_path / "resumed", DEVICE, run)
    _assert_same_weights(tmp_path / "full", tmp_path / "resumed")


def _assert_same_weights(a, b):
    for name in ("model.safetensors", "ema.safetensors"):
        left, right = load_file(Path(a) / name), load_file(Path(b) / name)
        assert all(torch.equal(left[k], right[k]) for k in left), name


def _worker(*args, env=None, **popen):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PJRT_DEVICE": "CPU", **(env or {})}
    return subprocess.Popen([sys.executable, str(WORKER), *map(str, args)], env=env, cwd=ROOT,
                            **popen)


def test_a_killed_xla_training_process_resumes_to_the_uninterrupted_weights(tmp_path):
    """SIGKILL mid-run, after the step-5 checkpoint (the worker waits at step 7 for it), then a
    fresh process resumes (loading the killed one's compiled programs, ``$ELF_XLA_CACHE``); it ends
    bit for bit where an uninterrupted run ends."""
    cache = {"ELF_XLA_CACHE": str(tmp_path / "xla_cache")}
    killed = _worker("train", tmp_path / "killed", "--hold-at", 7, env=cache)
    train_tiny(tmp_path / "full", DEVICE, tiny_xla_run(checkpoint_every=5))
    marker = tmp_path / "killed" / "held"
    deadline = time.time() + 600
    while not marker.exists():
        assert killed.poll() is None and time.time() < deadline, "the worker never reached step 7"
        time.sleep(0.2)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    state = torch.load(tmp_path / "killed" / "resume" / "state.pt", weights_only=True)
    assert state["step"] == 5 and not (tmp_path / "killed" / "ema.safetensors").exists()
    assert any((tmp_path / "xla_cache").iterdir())
    assert _worker("train", tmp_path / "killed", env=cache).wait(timeout=600) == 0
    assert not (tmp_path / "killed" / "resume").exists()
    _assert_same_weights(tmp_path / "full", tmp_path / "killed")


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_data_parallel_over_two_xla_devices_equals_the_cpu_run(tmp_path, grad_accum):
    """As ``elf train --device xla`` on a host with two XLA devices: one SPMD process whose loop
    splits each micro-batch's data and draws by rows over the devices (4 and 4, or with two
    micro-batches 2 and 2). It must equal the one-process CPU run on the same global batch, split
    every batch tensor by rows over both devices, and compile once per step structure."""
    dp = tmp_path / "dp"
    worker = _worker("train", dp, "--data-parallel", "--grad-accum", grad_accum,
                     env={"CPU_NUM_DEVICES": "2"}, stderr=subprocess.PIPE, text=True)
    train_tiny(tmp_path / "cpu", "cpu")
    _, err = worker.communicate(timeout=600)
    assert worker.returncode == 0, err[-3000:]
    record = json.loads((dp / "spmd.json").read_text())
    assert record["devices"] == 2
    # data (B, L, d) / (B, L), draws (B, L, d) / (B,): rows over devices 0 and 1, the rest whole
    assert record["shardings"] == ["{devices=[2,1,1]0,1}", "{devices=[2,1]0,1}", "{devices=[2]0,1}"]
    counts = record["compiles"]
    print(f"SPMD (2 devices, grad_accum {grad_accum}): compilations after each step: {counts}")
    assert counts[1] == counts[-1] <= 2, counts
    # measured: losses within 2.3e-7 relative, EMA weights within 2.4e-7 of the CPU run
    for cpu, xla in zip(_log(tmp_path / "cpu"), _log(dp), strict=True):
        assert xla["loss"] == pytest.approx(cpu["loss"], rel=1e-5), cpu["step"]
        assert xla["grad_norm"] == pytest.approx(cpu["grad_norm"], rel=1e-4), cpu["step"]
    ema_cpu, ema_dp = (load_file(d / "ema.safetensors") for d in (tmp_path / "cpu", dp))
    for key in ema_cpu:
        torch.testing.assert_close(ema_dp[key], ema_cpu[key], rtol=0, atol=5e-6, msg=key)


def test_a_crashed_data_parallel_run_resumes_to_the_uninterrupted_one(tmp_path):
    """SPMD over two devices, crashed after step 5 (checkpoint at step 3), rerun: it resumes from
    the step-3 checkpoint (saved from replicated device tensors to the CPU) and ends bit for bit
    where an uninterrupted SPMD run ends."""
    spmd = {"CPU_NUM_DEVICES": "2"}
    for out, crash in (("full", None), ("resumed", 5), ("resumed", None)):
        args = ("--crash-at", crash) if crash else ()
        worker = _worker("train", tmp_path / out, "--data-parallel", *args, env=spmd,
                         stderr=subprocess.PIPE, text=True)
        _, err = worker.communicate(timeout=600)
        assert (worker.returncode != 0) == bool(crash), err[-3000:]
        if crash:
            assert "CrashForTest" in err
            state = torch.load(tmp_path / out / "resume" / "state.pt", weights_only=True)
            assert state["step"] == 3
    assert not (tmp_path / "resumed" / "resume").exists()
    _assert_same_weights(tmp_path / "full", tmp_path / "resumed")


def test_a_micro_batch_that_does_not_split_over_the_devices_is_refused_before_any_step(tmp_path):
    worker = _worker("train", tmp_path / "dp", "--data-parallel", "--grad-accum", 8,
                     env={"CPU_NUM_DEVICES": "2"}, stderr=subprocess.PIPE, text=True)
    _, err = worker.communicate(timeout=600)
    assert worker.returncode != 0
    assert "micro-batch 1 does not split over the 2 XLA devices" in err
    assert not (tmp_path / "dp" / "train_log.jsonl").exists()
    assert not (tmp_path / "dp" / "resume").exists()
