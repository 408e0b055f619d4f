"""The fast paths of issue 20 against the plain computations they replace: batched Newton–Schulz,
the batched Muon step, cached RoPE tables and the one-pass rotation, the first pass on the rows that
use it, the sampler's precomputed times, the malloc setting, and the device check's CPU run.

The parity fixtures (test_fixtures_*.py, test_optim.py) pin the numbers against the authors' code;
these tests pin each fast path against the slow one it replaced, mostly bit for bit on CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from elf.config import ObjectiveSettings, SamplerSettings
from elf.flow.objective import draw_step, training_step
from elf.flow.samplers import Denoiser, rollout
from elf.model import RopeCache, apply_rope, rope_tables
from elf.runtime import tune_malloc
from elf.train.optim import (NS_COEFFICIENTS, Muon, muon_scale, nesterov_coefficients,
                             newton_schulz, newton_schulz_many)
from tests.helpers import tiny_model

REPO = Path(__file__).resolve().parents[1]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------------------------------
# Newton–Schulz and Muon
# --------------------------------------------------------------------------------------------------

def plain_newton_schulz(update, steps=5, eps=1e-8):
    """Muon's quintic iteration as the spec writes it (§4), one matrix, separate ops."""
    a, b, c = NS_COEFFICIENTS
    x = update.float()
    transposed = x.shape[0] > x.shape[1]
    x = x.T if transposed else x
    x = x / (torch.linalg.matrix_norm(x) + eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.T if transposed else x


def test_fused_newton_schulz_equals_the_plain_iteration_to_fp32_rounding():
    for shape in ((16, 48), (48, 16), (32, 32), (8, 200)):
        u = torch.randn(shape, generator=gen(sum(shape)))
        ours, plain = newton_schulz(u), plain_newton_schulz(u)
        reference = newton_schulz(u.double(), dtype=torch.float64)
        # both fp32 versions sit within fp32 rounding of the fp64 iteration, and of each other
        torch.testing.assert_close(ours, plain, rtol=0, atol=2e-6)
        assert (ours.double() - reference).abs().max() < 2e-6
        assert (plain.double() - reference).abs().max() < 2e-6


def test_batched_newton_schulz_equals_per_matrix():
    shapes = [(24, 40), (24, 40), (40, 24), (24, 40), (12, 12), (40, 24), (7, 30)]
    updates = [torch.randn(s, generator=gen(i)) for i, s in enumerate(shapes)]
    batched = newton_schulz_many(updates)
    for u, ours in zip(updates, batched):
        assert ours.shape == u.shape
        torch.testing.assert_close(ours, newton_schulz(u), rtol=1e-6, atol=1e-7)
    stack = torch.stack(updates[:2])
    torch.testing.assert_close(newton_schulz(stack)[1], newton_schulz(updates[1]), rtol=1e-6,
                               atol=1e-7)


def reference_muon_step(p, grad, buf, step, lr, beta=0.95, stored_in_out=False):
    """One Muon update of one parameter, written out (the released code's order of operations)."""
    buf.lerp_(grad, 1 - beta)
    coef_m, coef_g = nesterov_coefficients(beta, step)
    ortho = plain_newton_schulz(buf * coef_m + grad * coef_g)
    p.add_(ortho, alpha=-lr * muon_scale(p.shape, stored_in_out))


def test_muon_batched_step_equals_per_parameter_updates():
    shapes = [(6, 10), (6, 10), (10, 6), (4, 4), (6, 10)]
    in_out = [False, False, False, False, True]
    params = [nn.Parameter(torch.randn(s, generator=gen(10 + i))) for i, s in enumerate(shapes)]
    refs = [p.detach().clone() for p in params]
    bufs = [torch.zeros_like(p) for p in params]
    groups = [{"params": [p for p, io in zip(params, in_out) if not io]},
              {"params": [p for p, io in zip(params, in_out) if io], "stored_in_out": True}]
    opt = Muon(groups, lr=0.1)
    for step in (1, 2, 3):
        grads = [torch.randn(s, generator=gen(100 * step + i)) for i, s in enumerate(shapes)]
        grads[3] = None if step == 2 else grads[3]  # a missing gradient steps as a zero one
        for p, g in zip(params, grads):
            p.grad = None if g is None else g.clone()
        opt.step()
        for ref, g, buf, io in zip(refs, grads, bufs, in_out):
            reference_muon_step(ref, torch.zeros_like(ref) if g is None else g, buf, step, 0.1,
                                stored_in_out=io)
        for p, ref in zip(params, refs):
            torch.testing.assert_close(p.detach(), ref, rtol=1e-5, atol=1e-6)


def test_muon_at_lr_zero_moves_nothing_but_the_momentum():
    p = nn.Parameter(torch.randn(5, 7, generator=gen(1)))
    start = p.detach().clone()
    opt = Muon([p], lr=0.0)
    p.grad = torch.randn(5, 7, generator=gen(2))
    opt.step()
    assert torch.equal(p.detach(), start)
    torch.testing.assert_close(opt.state[p]["momentum_buffer"], 0.05 * p.grad)
    assert opt.state[p]["step"] == 1


# --------------------------------------------------------------------------------------------------
# RoPE
# --------------------------------------------------------------------------------------------------

def pairwise_rope(x, length, head_dim, n_skip, theta=10000.0):
    """The rotation as the model did it before issue 20: tables rebuilt, pairs rotated by slices,
    control tokens concatenated back unrotated."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.arange(length, dtype=torch.float32)[:, None] * inv_freq[None]
    cos, sin = torch.cos(angles), torch.sin(angles)
    ctrl, text = x[:, :, :n_skip], x[:, :, n_skip:]
    even, odd = text[..., 0::2].float(), text[..., 1::2].float()
    text = torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)
    return torch.cat([ctrl, text.to(x.dtype)], dim=2)


def test_cached_rope_tables_equal_rebuilt_ones():
    cache = RopeCache(head_dim=16, theta=10000.0, n_skip=3)
    first = cache(10, "cpu")
    assert cache(10, "cpu") is first and cache(12, "cpu") is not first
    fresh = rope_tables(10, 16, 10000.0, "cpu", n_skip=3)
    for ours, rebuilt in zip(first, fresh):
        assert torch.equal(ours, rebuilt)
    assert torch.equal(first.cos[:3], torch.ones(3, 8)) and torch.equal(first.sin[:3], torch.zeros(3, 8))
    assert torch.equal(first.cis, torch.complex(first.cos, first.sin))


@pytest.mark.parametrize("compiling", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_pass_rope_equals_pairwise_rotation(monkeypatch, compiling, dtype):
    """Eager (complex product) and compile (real formula) paths: bit-identical to the per-pair
    rotation on CPU, forward and backward; control tokens untouched."""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: compiling)
    B, H, n_skip, L, hd = 2, 3, 4, 9, 16
    x = torch.randn(B, H, n_skip + L, hd, generator=gen(5)).to(dtype).requires_grad_(True)
    rope = rope_tables(L, hd, 10000.0, "cpu", n_skip=n_skip, with_cis=not compiling)
    ours, reference = apply_rope(x, rope), pairwise_rope(x, L, hd, n_skip)
    assert ours.dtype == dtype and torch.equal(ours, reference)
    assert torch.equal(ours[:, :, :n_skip], x[:, :, :n_skip])
    weight = torch.randn(ours.shape, generator=gen(6)).to(dtype)
    (g_ours,) = torch.autograd.grad(ours, x, weight)
    (g_ref,) = torch.autograd.grad(reference, x, weight)
    assert torch.equal(g_ours, g_ref)


# --------------------------------------------------------------------------------------------------
# The first pass on the rows that read it
# --------------------------------------------------------------------------------------------------

def step_inputs(B=8, L=12, d=16, vocab=32, conditional=False):
    g = gen(3)
    batch = dict(x=torch.randn(B, L, d, generator=g), input_ids=torch.randint(3, vocab, (B, L), generator=g),
                 attention_mask=torch.ones(B, L, dtype=torch.long),
                 cond_seq_mask=torch.zeros(B, L, dtype=torch.long))
    if conditional:
        batch["cond_seq_mask"][:, :4] = 1
        batch["x_nosource"] = torch.randn(B, L, d, generator=g)
    s = ObjectiveSettings(decode_prob=0.3, label_drop_prob=0.5 if conditional else 0.0)
    draws = draw_step((B, L, d), s, gen(4))
    draws.use_self_cond = torch.tensor([1., 1, 0, 1, 0, 1, 1, 0])
    draws.decode_row = torch.tensor([1., 0, 0, 0, 1, 0, 0, 0])
    return batch, draws, s


@pytest.mark.parametrize("prediction", ["x", "v"])
@pytest.mark.parametrize("target", ["main_forward", "extra_forward"])
@pytest.mark.parametrize("conditional", [False, True])
def test_first_pass_on_needed_rows_gives_the_same_loss_and_gradients(prediction, target, conditional):
    batch, draws, s = step_inputs(conditional=conditional)
    s = ObjectiveSettings(**{**vars(s), "sc_cfg_target": target})
    results = []
    for all_rows in (True, False):
        model = tiny_model(seed=1)
        with torch.no_grad():
            model.final_layer.linear.weight.normal_(0, 0.1, generator=gen(7))
        out = training_step(model, batch, draws, s, prediction=prediction,
                            first_pass_all_rows=all_rows)
        out.loss.backward()
        results.append((out, {n: p.grad for n, p in model.named_parameters()}))
    (full, g_full), (rows, g_rows) = results
    torch.testing.assert_close(rows.loss, full.loss, rtol=1e-6, atol=0)
    torch.testing.assert_close(rows.sums, full.sums, rtol=1e-6, atol=1e-7)
    for name, grad in g_full.items():
        if grad is not None:
            torch.testing.assert_close(g_rows[name], grad, rtol=1e-5, atol=1e-7, msg=name)
    used = (draws.use_self_cond * (1 - draws.decode_row)) > 0
    torch.testing.assert_close(rows.parts["x_hat_first"][used], full.parts["x_hat_first"][used],
                               rtol=1e-6, atol=1e-7)
    assert torch.equal(rows.parts["x_hat_first"][~used], torch.zeros_like(rows.parts["x_hat_first"][~used]))


# --------------------------------------------------------------------------------------------------
# Sampler times, malloc, the device check
# --------------------------------------------------------------------------------------------------

def test_denoiser_takes_a_device_time_as_it_takes_a_float():
    model = tiny_model(seed=2, d=8, vocab_size=8, max_length=6).eval()
    z, x_prev = torch.randn(3, 6, 8, generator=gen(1)), torch.randn(3, 6, 8, generator=gen(2))
    s = SamplerSettings(sc_cfg=2.0)
    with torch.no_grad():
        a = Denoiser(model, s)(z, x_prev, 0.3)
        b = Denoiser(model, s)(z, x_prev, torch.tensor(0.3))
    for ours, ref in zip(a, b):
        assert torch.equal(ours, ref)


def test_rollout_network_times_are_the_per_step_values():
    seen = []

    class Spy(nn.Module):
        def forward(self, x_in, t, w, mode=None):
            seen.append(t.clone())
            return torch.zeros_like(x_in[..., :4]), None

    grid = torch.tensor([0.0, 0.3, 0.65, 0.9, 1.0])
    s = SamplerSettings(method="sde", steps=4, gamma=1.3, grid="uniform")
    rollout(Spy(), s, torch.randn(2, 3, 4, generator=gen(1)), gen(2), grid=grid)
    times = grid.tolist()
    expected = [min(max(1 - 1.3 * (times[k + 1] - times[k]), 0), 1) * times[k] for k in range(3)]
    expected.append(times[3])  # the last step is ODE, at t itself
    for t, e in zip(seen, expected):
        assert torch.equal(t, torch.full((2,), e))


def test_tune_malloc_applies_on_glibc_and_is_switched_off_by_env(monkeypatch):
    if sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION"):
        assert tune_malloc()
    monkeypatch.setenv("ELF_MALLOC_TUNING", "0")
    assert not tune_malloc()


def test_device_check_runs_on_cpu_and_prints_every_row():
    rows = ("peak", "train eager fp32", "train eager bf16", "train compile fp32",
            "train compile bf16", "loss fp32 vs bf16", "sample", "score")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(["bash", str(REPO / "benchmarks" / "device_check.sh"), "--tiny",
                          "--device", "cpu", "--budget-s", "100"], capture_output=True,
                         text=True, timeout=180, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[1].split()[:3] == ["row", "shape", "batch"]
    for name in rows:
        row = next((line for line in lines if line.startswith(name + " ")), None)
        assert row is not None, f"no '{name}' row in:\n{out.stdout}"
        assert "failed" not in row and "cap" not in row and "skipped" not in row, row
    train = next(line for line in lines if line.startswith("train eager fp32"))
    assert "tokens/s" in train and "%" in train  # a throughput and an MFU
    assert "|diff|" in next(line for line in lines if line.startswith("loss"))
    assert "1000 samples" in next(line for line in lines if line.startswith("sample"))
