"""Tests of elf/train/optim.py: Muon / Nesterov-Adam against the authors' fixtures, schedule, clipping, EMA.

Run: ``python -m pytest tests/test_optim.py -q`` from the repository root. The fixture tests read
the repacked copy in ``tests/fixtures`` (or the originals in ``$ELF_FIXTURES``).
"""

from __future__ import annotations

import functools
import io
import math

import pytest
import torch
from torch import nn

from elf.config import OptimSettings
from elf.train.optim import (EMA, ElfOptimizer, Muon, NesterovAdam, build_optimizer, clip_grad_norm,
                             lr_at, muon_scale, newton_schulz)
from tests.fixtures_util import load_fixture


@functools.lru_cache(maxsize=None)
def _fixture(name: str) -> dict:
    return load_fixture(name)


@pytest.fixture(scope="module")
def steps_fx() -> dict:
    return _fixture("optimizer_steps.pt")


def _toy_run(fx: dict, bias_correction: bool = True):
    """Parameters and optimiser built from ``optimizer_steps.pt`` the way the training stage builds them."""
    cfg = fx["config"]
    params = {n: nn.Parameter(t.clone()) for n, t in fx["params_init"].items()}
    settings = OptimSettings(name="muon", betas=tuple(cfg["adam_betas"]), weight_decay=cfg["weight_decay"])
    opt = build_optimizer(params.items(), settings, lr=cfg["lr"],
                          in_out_names=cfg["muon_params_stored_in_out"])
    for group in opt.param_groups:
        if "bias_correction" in group:
            group["bias_correction"] = bias_correction
    return params, opt


def _feed(params: dict, grads: dict) -> None:
    for name, p in params.items():
        p.grad = grads[name].clone()


def _max_mismatch(params: dict, expected: dict, rtol=1e-5, atol=1e-6) -> float:
    """Largest |ours − expected| − (atol + rtol·|expected|) over all tensors (≤ 0 means all close)."""
    return max(((p.detach() - expected[n]).abs() - atol - rtol * expected[n].abs()).max().item()
               for n, p in params.items())


# --------------------------------------------------------------------------------------------------
# optimizer_steps.pt: three steps of the released optimiser
# --------------------------------------------------------------------------------------------------

def test_partition_matches_fixture(steps_fx):
    cfg = steps_fx["config"]
    _, opt = _toy_run(steps_fx)
    assert sorted(opt.partition["muon"] + opt.partition["muon_in_out"]) == sorted(cfg["muon_params"])
    assert opt.partition["muon_in_out"] == cfg["muon_params_stored_in_out"]
    assert sorted(opt.partition["adam"]) == sorted(cfg["adam_params"])


def test_three_steps_match_fixture(steps_fx):
    params, opt = _toy_run(steps_fx)
    for k in range(steps_fx["config"]["num_steps"]):
        _feed(params, steps_fx["grads"][k])
        opt.step()
        for name, p in params.items():
            torch.testing.assert_close(p.detach(), steps_fx["params_after"][k][name], rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"step {k + 1}, {name}: {m}")


def test_missing_bias_correction_is_caught_at_steps_2_and_3(steps_fx):
    params, opt = _toy_run(steps_fx, bias_correction=False)
    mismatch = []
    for k in range(3):
        _feed(params, steps_fx["grads"][k])
        opt.step()
        mismatch.append(_max_mismatch(params, steps_fx["params_after"][k]))
    assert mismatch[0] <= 0  # Newton–Schulz normalises the first step's rescaling away
    assert mismatch[1] > 1e-4 and mismatch[2] > 1e-4  # README: 3.5e-4


def test_ignoring_in_out_layout_is_caught(steps_fx):
    params, opt = _toy_run(steps_fx)
    for group in opt.param_groups:
        group["stored_in_out"] = False
    _feed(params, steps_fx["grads"][0])
    opt.step()
    assert _max_mismatch({"kernel": params["kernel"]}, steps_fx["params_after"][0]) > 1e-4


def test_exact_resume_through_state_dict(steps_fx):
    params, opt = _toy_run(steps_fx)
    _feed(params, steps_fx["grads"][0])
    opt.step()
    buffer = io.BytesIO()
    torch.save({"params": {n: p.detach() for n, p in params.items()}, "opt": opt.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)

    resumed, resumed_opt = _toy_run(steps_fx)
    with torch.no_grad():
        for n, p in resumed.items():
            p.copy_(saved["params"][n])
    resumed_opt.load_state_dict(saved["opt"])
    for k in (1, 2):
        for run_params, run_opt in ((params, opt), (resumed, resumed_opt)):
            _feed(run_params, steps_fx["grads"][k])
            run_opt.step()
        for n in params:
            assert torch.equal(params[n], resumed[n]), f"resume differs at step {k + 1}, {n}"
    assert _max_mismatch(resumed, steps_fx["params_after"][2]) <= 0


def test_load_state_dict_rejects_other_partition(steps_fx):
    _, opt = _toy_run(steps_fx)
    other = build_optimizer([("w", nn.Parameter(torch.ones(2, 2)))], OptimSettings(), lr=1e-3)
    with pytest.raises(ValueError, match="partition"):
        opt.load_state_dict(other.state_dict())


# --------------------------------------------------------------------------------------------------
# EMA on the training-step fixtures
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["train_step_uncond.pt", "train_step_cond.pt"])
def test_ema_movement_matches_fixture(name):
    fx = _fixture(name)
    start, after = fx["state_dict"], fx["expected"]["params_after"]
    expected = fx["expected"]["ema_after"]
    ema = EMA(start, decay=fx["config"]["optimizer"]["ema_decay"])
    ema.update(after)

    def movement_error(shadow):
        return max(((expected[n] - start[n]) - (shadow[n] - start[n])).abs().max().item() for n in start)

    assert movement_error(ema.shadow) <= 2e-7
    for n in start:
        torch.testing.assert_close(ema.shadow[n], expected[n], rtol=1e-5, atol=1e-6)
    assert movement_error(start) > 2e-7  # a skipped update would be caught (README: 3.1e-7)
    wrong = EMA(start, decay=0.999)
    wrong.update(after)
    assert movement_error(wrong.shadow) > 1e-6


# --------------------------------------------------------------------------------------------------
# Hand-derived small cases
# --------------------------------------------------------------------------------------------------

def test_newton_schulz_of_diagonal_matrix():
    # diag(3, 4): Frobenius norm 5, so X0 = diag(0.6, 0.8); the iteration acts on each diagonal entry
    # as s ← a·s + b·s³ + c·s⁵ and keeps the off-diagonal zeros.
    a, b, c = 3.4445, -4.7750, 2.0315
    expected = []
    for s in (3 / (5 + 1e-8), 4 / (5 + 1e-8)):
        for _ in range(5):
            s = a * s + b * s ** 3 + c * s ** 5
        expected.append(s)
    out = newton_schulz(torch.diag(torch.tensor([3.0, 4.0])))
    # fp32 round-off grows through the five polynomial steps (slope up to ~3.4), hence 1e-5
    torch.testing.assert_close(out, torch.diag(torch.tensor(expected, dtype=torch.float32)),
                               rtol=1e-5, atol=1e-7)


def test_newton_schulz_transposes_tall_matrices():
    g = torch.randn(10, 6, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(newton_schulz(g), newton_schulz(g.T).T, rtol=0, atol=0)
    singular = torch.linalg.svdvals(newton_schulz(g).double())
    assert singular.min() > 0.5 and singular.max() < 1.5  # roughly orthogonal columns


def test_muon_scale_reads_storage_layout():
    assert muon_scale((6, 20), stored_in_out=True) == pytest.approx(math.sqrt(20 / 6))
    assert muon_scale((6, 20), stored_in_out=False) == 1.0
    assert muon_scale((10, 6), stored_in_out=False) == pytest.approx(math.sqrt(10 / 6))
    assert muon_scale((10, 6), stored_in_out=True) == 1.0
    assert muon_scale((64, 512), stored_in_out=True) == pytest.approx(math.sqrt(8))


@pytest.mark.parametrize("stored_in_out, scale", [(False, 1.0), (True, 2.0)])
def test_muon_first_step_is_scaled_orthogonalised_gradient(stored_in_out, scale):
    grad = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    p = nn.Parameter(torch.zeros(4, 16))
    p.grad = grad
    Muon([p], lr=0.1, stored_in_out=stored_in_out).step()
    # At k = 1 the Nesterov update is a multiple of g, which Newton–Schulz normalises away.
    torch.testing.assert_close(p.detach(), -0.1 * scale * newton_schulz(grad), rtol=1e-5, atol=1e-6)


def test_muon_decoupled_weight_decay():
    grad = torch.randn(3, 5, generator=torch.Generator().manual_seed(2))
    start = torch.randn(3, 5, generator=torch.Generator().manual_seed(3))
    plain, decayed = nn.Parameter(start.clone()), nn.Parameter(start.clone())
    plain.grad, decayed.grad = grad.clone(), grad.clone()
    Muon([plain], lr=0.01).step()
    Muon([decayed], lr=0.01, weight_decay=0.5).step()
    torch.testing.assert_close(decayed - plain, -0.01 * 0.5 * start, rtol=1e-4, atol=1e-7)


def test_muon_rejects_non_matrices():
    with pytest.raises(ValueError, match="2-D"):
        Muon([nn.Parameter(torch.zeros(3))])


def test_nesterov_adam_first_two_steps_by_hand():
    p = nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = NesterovAdam([p], lr=0.01)
    g1, g2 = torch.tensor([0.5, -0.25]), torch.tensor([0.1, 0.3])
    p.grad = g1.clone()
    opt.step()
    # m = 0.1 g, v = 0.001 g²; m̂ = (0.9·0.1/(1 − 0.81) + 1)·g = 1.4737·g; v̂ = g²
    first = torch.tensor([1.0, -2.0]) - 0.01 * (0.09 / 0.19 + 1) * g1 / (g1.abs() + 1e-8)
    torch.testing.assert_close(p.detach(), first, rtol=1e-6, atol=1e-7)
    p.grad = g2.clone()
    opt.step()
    m = 0.9 * 0.1 * g1 + 0.1 * g2
    v = 0.999 * 0.001 * g1 ** 2 + 0.001 * g2 ** 2
    m_hat = 0.9 * m / (1 - 0.9 ** 3) + 0.1 * g2 / (1 - 0.9 ** 2)
    v_hat = v / (1 - 0.999 ** 2)
    torch.testing.assert_close(p.detach(), first - 0.01 * m_hat / (v_hat.sqrt() + 1e-8),
                               rtol=1e-6, atol=1e-7)


def test_build_optimizer_partitions_by_dimension_and_name():
    model = nn.ModuleDict({"lin": nn.Linear(4, 3), "head": nn.Module()})
    model["head"].proj_kernel = nn.Parameter(torch.zeros(4, 8))
    model["head"].tokens = nn.Parameter(torch.zeros(1, 2, 4))
    frozen = nn.Parameter(torch.zeros(2, 2), requires_grad=False)
    model["head"].frozen = frozen
    opt = build_optimizer(model.named_parameters(), OptimSettings(), lr=1e-3)
    assert opt.partition == {"muon": ["lin.weight"], "muon_in_out": ["head.proj_kernel"],
                             "adam": ["lin.bias", "head.tokens"]}
    muon, adam = opt.optimizers
    assert isinstance(muon, Muon) and isinstance(adam, NesterovAdam)
    assert [g["stored_in_out"] for g in muon.param_groups] == [False, True]
    assert all(frozen is not p for g in opt.param_groups for p in g["params"])


def test_build_adamw_and_set_lr():
    model = nn.Linear(4, 3)
    settings = OptimSettings(name="adamw", betas=(0.9, 0.95), weight_decay=0.05)
    opt = build_optimizer(model.named_parameters(), settings, lr=1e-4)
    assert isinstance(opt, ElfOptimizer) and len(opt.optimizers) == 1
    (adamw,) = opt.optimizers
    assert isinstance(adamw, torch.optim.AdamW)
    group = adamw.param_groups[0]
    assert group["betas"] == (0.9, 0.95) and group["weight_decay"] == 0.05 and group["lr"] == 1e-4
    opt.set_lr(3e-4)
    assert all(g["lr"] == 3e-4 for g in opt.param_groups)
    model(torch.ones(1, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_lr_schedule_warmup_then_constant():
    """The authors' LambdaLR: optimiser step k runs at base·(k − 1)/w, step 1 at 0, step w + 1 at base."""
    settings = OptimSettings(blr=1e-3, warmup_steps=4)
    values = [lr_at(k, settings, batch_size=512) for k in range(1, 8)]
    assert values == pytest.approx([0.0, 0.5e-3, 1e-3, 1.5e-3, 2e-3, 2e-3, 2e-3])
    assert lr_at(1, OptimSettings(blr=1e-3, warmup_steps=0), batch_size=128) == pytest.approx(0.5e-3)
    with pytest.raises(ValueError):
        lr_at(0, settings, batch_size=512)


@pytest.mark.parametrize("name", ["train_step_uncond.pt", "train_step_cond.pt"])
def test_schedule_gives_the_training_fixtures_lr(name):
    """The fixtures were made without warm-up (their step 1 trains at lr 2e-3): lr_at agrees."""
    cfg = _fixture(name)["config"]
    opt, batch = cfg["optimizer"], cfg["batch_size"]
    settings = OptimSettings(blr=opt["lr"] * 256 / batch, warmup_steps=opt["warmup_steps"])
    assert opt["warmup_steps"] == 0
    assert lr_at(opt["optimizer_step_index"], settings, batch) == pytest.approx(opt["lr"])


def test_first_warmup_step_at_lr_zero_advances_the_optimiser_state():
    """Step 1 of a warm-up moves no weight, but its moments count: step 2 is then the optimiser's
    second step (Nesterov-Adam: m = 0.1·g₁ carried, v likewise, bias corrections of k = 2)."""
    w = nn.Parameter(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    b = nn.Parameter(torch.tensor([0.5, -0.5]))
    settings = OptimSettings(blr=1e-3, warmup_steps=2)
    opt = build_optimizer([("w", w), ("b", b)], settings, lr=lr_at(1, settings, 256))
    g1, g2 = torch.tensor([0.2, -0.4]), torch.tensor([0.1, 0.3])
    before = (w.detach().clone(), b.detach().clone())
    w.grad, b.grad = torch.ones(2, 2), g1.clone()
    opt.step()
    assert torch.equal(w.detach(), before[0]) and torch.equal(b.detach(), before[1])
    assert opt.optimizers[1].state[b]["step"] == 1
    lr2 = lr_at(2, settings, 256)
    opt.set_lr(lr2)
    w.grad, b.grad = torch.ones(2, 2), g2.clone()
    opt.step()
    m = 0.9 * 0.1 * g1 + 0.1 * g2
    v = 0.999 * 0.001 * g1 ** 2 + 0.001 * g2 ** 2
    m_hat = 0.9 * m / (1 - 0.9 ** 3) + 0.1 * g2 / (1 - 0.9 ** 2)
    v_hat = v / (1 - 0.999 ** 2)
    assert lr2 == pytest.approx(0.5e-3)
    torch.testing.assert_close(b.detach(), before[1] - lr2 * m_hat / (v_hat.sqrt() + 1e-8),
                               rtol=1e-6, atol=1e-9)


def test_muon_steps_a_parameter_without_gradient_with_its_momentum():
    """The authors' Muon zero-fills a missing gradient: the buffer decays to 0.95·m and is applied."""
    torch.manual_seed(0)
    g = torch.randn(3, 5)
    params = [nn.Parameter(torch.zeros(3, 5)) for _ in range(2)]
    opts = [Muon([p], lr=0.1) for p in params]
    for p, opt in zip(params, opts):
        p.grad = g.clone()
        opt.step()
    after_one = params[0].detach().clone()
    params[0].grad = None                      # missing gradient ...
    params[1].grad = torch.zeros(3, 5)         # ... is the same as a zero one
    for opt in opts:
        opt.step()
    assert torch.equal(params[0].detach(), params[1].detach())
    assert opts[0].state[params[0]]["step"] == 2
    buf = 0.95 * (0.05 * g)                    # lerp(m, 0, 0.05) after m = 0.05·g
    expected_move = 0.1 * newton_schulz(0.95 * buf / (1 - 0.95 ** 3)) * muon_scale((3, 5), False)
    torch.testing.assert_close(after_one - params[0].detach(), expected_move, rtol=1e-5, atol=1e-7)


def test_clip_grad_norm_scales_every_gradient():
    a, b = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(1))
    a.grad, b.grad = torch.tensor([3.0, 4.0]), torch.tensor([12.0])  # global norm 13
    norm, scale = clip_grad_norm([a, b], max_norm=1.0)
    assert norm.item() == pytest.approx(13.0)
    assert scale.item() == pytest.approx(1 / (13 + 1e-6), rel=1e-7)
    torch.testing.assert_close(b.grad, torch.tensor([12.0 / 13]), rtol=1e-6, atol=0)
    norm, scale = clip_grad_norm([a, b], max_norm=5.0)  # now below the limit: untouched
    assert scale.item() == 1.0 and norm.item() == pytest.approx(1.0, rel=1e-6)
    a.grad = torch.tensor([30.0, 40.0])
    norm, scale = clip_grad_norm([a, b], max_norm=0.0)  # disabled
    assert scale.item() == 1.0 and norm.item() > 50 and a.grad[0].item() == 30.0


@pytest.mark.parametrize("name", ["train_step_uncond.pt", "train_step_cond.pt"])
def test_clip_scale_formula_matches_fixture(name):
    expected = _fixture(name)["expected"]
    p = nn.Parameter(torch.zeros(1))
    p.grad = torch.tensor([expected["grad_norm"]], dtype=torch.float32)
    _, scale = clip_grad_norm([p], max_norm=1.0, eps=1e-6)
    assert scale.item() == pytest.approx(expected["grad_clip_scale"], rel=1e-6)


def test_ema_warmup_state_and_copy_to():
    model = nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 2.0]]))
    ema = EMA(model, decay=0.99, warmup=True)
    assert ema.decay_at(1) == pytest.approx(2 / 11) and ema.decay_at(10**6) == 0.99
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[3.0, 6.0]]))
    ema.update(model)
    d = 2 / 11
    torch.testing.assert_close(ema.shadow["weight"], torch.tensor([[1.0, 2.0]]) * d
                               + torch.tensor([[3.0, 6.0]]) * (1 - d))
    restored = EMA(model, decay=0.5)
    restored.load_state_dict(ema.state_dict())
    assert restored.num_updates == 1 and restored.decay == 0.99 and restored.warmup
    restored.copy_to(model)
    torch.testing.assert_close(model.weight.detach(), ema.shadow["weight"])
    with pytest.raises(ValueError, match="names"):
        ema.update({"other": torch.zeros(1, 2)})
