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
