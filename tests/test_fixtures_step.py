"""Parity of one whole training step (objective → clip → Muon/Nesterov-Adam → EMA) with the
authors' code: `params_after` and `ema_after` of the training fixtures (issue 10)."""

import pytest
import torch

from elf.config import OptimSettings
from elf.train.optim import EMA, build_optimizer, clip_grad_norm
from tests.test_fixtures_flow import replay_step


@pytest.mark.parametrize("name", ["train_step_uncond.pt", "train_step_cond.pt"])
def test_one_optimizer_step_matches_released_code(name):
    fx, model, out = replay_step(name)
    opt_cfg = fx["config"]["optimizer"]
    ema = EMA(model, opt_cfg["ema_decay"])
    optimizer = build_optimizer(model.named_parameters(), OptimSettings(), lr=opt_cfg["lr"])
    assert sorted(optimizer.partition["muon"] + optimizer.partition["muon_in_out"]) == \
        sorted(opt_cfg["muon_params"])
    assert sorted(optimizer.partition["muon_in_out"]) == sorted(opt_cfg["muon_params_stored_in_out"])
    out.loss.backward()
    grad_norm, scale = clip_grad_norm(model.parameters(), opt_cfg["grad_clip_max_norm"])
    assert scale.item() == pytest.approx(fx["expected"]["grad_clip_scale"], rel=1e-4)
    optimizer.step()
    ema.update(model)
    for pname, param in model.named_parameters():
        torch.testing.assert_close(param.detach(), fx["expected"]["params_after"][pname],
                                   rtol=1e-5, atol=2e-5, msg=lambda m: f"{pname}: {m}")
        moved = ema.shadow[pname] - fx["state_dict"][pname]
        expected_moved = fx["expected"]["ema_after"][pname] - fx["state_dict"][pname]
        torch.testing.assert_close(moved, expected_moved, rtol=0, atol=2e-7)


def test_skipping_gradient_clipping_is_caught():
    """The conditional step's gradient norm is 75.6: without the clip, params_after moves."""
    fx, model, out = replay_step("train_step_cond.pt")
    optimizer = build_optimizer(model.named_parameters(), OptimSettings(),
                                lr=fx["config"]["optimizer"]["lr"])
    out.loss.backward()
    optimizer.step()  # no clip
    worst = max((p.detach() - fx["expected"]["params_after"][n]).abs().max().item()
                for n, p in model.named_parameters())
    assert worst > 1e-4


def _one_step_worst_error(name, patch_optimizer=None):
    """Max |params_after − ours| over all tensors after one (possibly deviated) step."""
    fx, model, out = replay_step(name)
    opt_cfg = fx["config"]["optimizer"]
    optimizer = build_optimizer(model.named_parameters(), OptimSettings(), lr=opt_cfg["lr"])
    if patch_optimizer:
        patch_optimizer(optimizer)
    out.loss.backward()
    clip_grad_norm(model.parameters(), opt_cfg["grad_clip_max_norm"])
    optimizer.step()
    return max((p.detach() - fx["expected"]["params_after"][n]).abs().max().item()
               for n, p in model.named_parameters())


def test_newton_schulz_in_bf16_is_caught():
    def bf16(optimizer):
        for group in optimizer.optimizers[0].param_groups:
            group["ns_dtype"] = torch.bfloat16
    assert _one_step_worst_error("train_step_uncond.pt") < 2e-5
    assert _one_step_worst_error("train_step_uncond.pt", bf16) > 1e-4


def test_adam_without_nesterov_term_is_caught(monkeypatch):
    from elf.train import optim

    def plain_adam(p, grad, state, group):  # m̂ = m/(1 − β1^k): no Nesterov look-ahead
        beta1, beta2 = group["betas"]
        k = state["step"]
        state["exp_avg"].lerp_(grad, 1 - beta1)
        state["exp_avg_sq"].lerp_(grad * grad, 1 - beta2)
        m_hat = state["exp_avg"] / (1 - beta1 ** k)
        v_hat = state["exp_avg_sq"] / (1 - beta2 ** k)
        p.sub_(group["lr"] * m_hat / (v_hat.sqrt() + group["eps"]))

    monkeypatch.setattr(optim.NesterovAdam, "_update", staticmethod(plain_adam))
    assert _one_step_worst_error("train_step_uncond.pt") > 1e-4
