"""The training objective's equations on small tensors against hand-derived values (spec §1, §4)."""

import math

import pytest
import torch

from elf.config import ObjectiveSettings
from elf.flow.objective import StepDraws, draw_step, loss_mask, training_step
from elf.flow.paths import interpolate, sc_cfg_scale, velocity, x_from_output
from tests.helpers import tiny_data, tiny_model


def test_interpolation_and_velocity_by_hand():
    x, eps = torch.tensor([[1.0, -2.0]]), torch.tensor([[0.5, 0.25]])
    t = torch.tensor([0.25])
    z = interpolate(x, eps, t, 2.0)                       # 0.25·x + 0.75·2·eps
    torch.testing.assert_close(z, torch.tensor([[0.25 + 0.75, -0.5 + 0.375]]))
    v = velocity(x, z, t, 0.05)                           # (x − z)/0.75
    torch.testing.assert_close(v, (x - z) / 0.75)
    v_clamped = velocity(x, z, torch.tensor([0.99]), 0.05)  # max(0.01, 0.05) = 0.05
    torch.testing.assert_close(v_clamped, (x - z) / 0.05)


@pytest.mark.parametrize("prediction", ["x", "v", "eps"])
def test_prediction_targets_recover_x(prediction):
    g = torch.Generator().manual_seed(0)
    x, eps = torch.randn(3, 4, 5, generator=g), torch.randn(3, 4, 5, generator=g)
    t = torch.tensor([0.2, 0.5, 0.8])
    z = interpolate(x, eps, t, 2.0)
    out = {"x": x, "v": velocity(x, z, t, 0.05), "eps": eps}[prediction]
    torch.testing.assert_close(x_from_output(out, z, t, prediction, 0.05, 2.0), x)


def test_sc_cfg_scale_range_and_density():
    u = torch.linspace(0, 1, 10001)
    w = sc_cfg_scale(u, 0.5, 5.0)
    assert w.min().item() == pytest.approx(0.5) and w.max().item() == pytest.approx(5.0)
    # log-uniform in 1 + w: the median of 1 + w is the geometric mean sqrt(1.5 · 6) = 3.
    assert (1 + w[5000]).item() == pytest.approx(math.sqrt(1.5 * 6.0), rel=1e-4)
    draws = draw_step((4000, 2, 2), ObjectiveSettings(), torch.Generator().manual_seed(1))
    assert draws.w.min() >= 0.5 and draws.w.max() <= 5.0
    # median w = 2 (vs 0.33 of the mass below 2 for a uniform w): denser at small values
    assert (draws.w < 2.0).float().mean().item() == pytest.approx(0.5, abs=0.03)
    assert draws.decode_row.mean().item() == pytest.approx(0.2, abs=0.03)


def _step(model, data, draws, **kw):
    return training_step(model, data, draws, ObjectiveSettings(**kw.pop("settings", {})), **kw)


def _draws(B, L, d, *, decode=None, t=None, use_sc=None, w=None, seed=0):
    d_ = draw_step((B, L, d), ObjectiveSettings(), torch.Generator().manual_seed(seed))
    for name, value in dict(decode_row=decode, t=t, use_self_cond=use_sc, w=w).items():
        if value is not None:
            setattr(d_, name, torch.as_tensor(value, dtype=torch.float32))
    return d_


def test_sc_cfg_target_is_plain_target_when_w_is_one_or_no_self_cond():
    model, data = tiny_model(), tiny_data(4)
    with torch.no_grad():
        for p in model.final_layer.parameters():  # non-trivial x̂ so v̂_c ≠ v̂_u
            p.normal_(std=0.1)
    draws = _draws(4, 12, 16, decode=[0, 0, 0, 0], use_sc=[1, 1, 0, 0], w=[1.0, 3.0, 3.0, 1.0])
    parts = _step(model, data, draws).parts
    plain = parts["v_target"]
    torch.testing.assert_close(parts["v_star"][[0, 2, 3]], plain[[0, 2, 3]])
    assert (parts["v_star"][1] - plain[1]).abs().max() > 1e-4  # guided row moves


def test_decode_rows_see_t_one_mode_on_and_empty_self_cond():
    model, data = tiny_model(), tiny_data(4)
    with torch.no_grad():
        model.final_layer.linear.weight.normal_(std=0.1)  # zero-init head would give x̂₀ = 0
    seen = []
    forward = model.forward
    model.forward = lambda x, t, w, mode=None, **kw: seen.append((x, t, mode)) or forward(x, t, w, mode, **kw)
    draws = _draws(4, 12, 16, decode=[1, 0, 1, 0], use_sc=[1, 1, 1, 1], t=[0.3, 0.4, 0.5, 0.6])
    _step(model, data, draws)
    x_main, t_main, mode = seen[-1]
    torch.testing.assert_close(t_main, torch.tensor([1.0, 0.4, 1.0, 0.6]))
    torch.testing.assert_close(mode, torch.tensor([1.0, 0.0, 1.0, 0.0]))
    assert x_main[[0, 2], :, 16:].abs().max() == 0          # decode rows: zero self-cond half
    assert x_main[[1, 3], :, 16:].abs().max() > 0           # self-cond denoise rows: x̂₀
    assert seen[0][2] is None                                # first pass: mode off


def test_source_positions_never_move_and_are_masked():
    model, data = tiny_model(), tiny_data(2)
    data["cond_seq_mask"][:, :5] = 1
    draws = _draws(2, 12, 16, decode=[0, 0], use_sc=[1, 0])
    parts = _step(model, data, draws, loss_covers_padding=True).parts
    torch.testing.assert_close(parts["z_t"][:, :5], data["x"][:, :5])
    torch.testing.assert_close(parts["sc_half"][:, :5], data["x"][:, :5])
    assert parts["loss_mask"][:, :5].sum() == 0 and parts["loss_mask"][:, 5:].min() == 1


def test_loss_masking_and_single_denominator_by_hand():
    data = dict(attention_mask=torch.tensor([[1, 1, 0], [1, 1, 1]]),
                cond_seq_mask=torch.tensor([[0, 0, 0], [1, 0, 0]]))
    torch.testing.assert_close(loss_mask(data, False), torch.tensor([[1.0, 1, 0], [0, 1, 1]]))
    torch.testing.assert_close(loss_mask(data, True), torch.tensor([[1.0, 1, 1], [0, 1, 1]]))
    model, data = tiny_model(), tiny_data(2)
    data["attention_mask"][0, 8:] = 0
    draws = _draws(2, 12, 16, decode=[1, 0])
    out = _step(model, data, draws)
    p = out.parts
    ce = p["ce_per_token"][0, :8].sum()
    l2 = p["l2_per_token"][1].sum()
    assert out.loss.item() == pytest.approx(((ce + l2) / 20).item(), rel=1e-6)
    assert out.ce_loss.item() == pytest.approx((ce / 8).item(), rel=1e-6)
    assert out.l2_loss.item() == pytest.approx((l2 / 12).item(), rel=1e-6)


def test_two_forward_target_equals_three_forward_target():
    """Spec §4 step 4: computing v̂_c from the main forward gives the released loss and gradients."""
    torch.manual_seed(0)
    data = tiny_data(6)
    results = []
    for target in ("extra_forward", "main_forward"):
        model = tiny_model(seed=3)
        with torch.no_grad():
            for p in model.final_layer.parameters():
                p.normal_(std=0.1, generator=torch.Generator().manual_seed(7))
        draws = _draws(6, 12, 16, decode=[0, 1, 0, 0, 0, 1], use_sc=[1, 1, 0, 1, 1, 0], seed=5)
        out = _step(model, data, draws, settings=dict(sc_cfg_target=target))
        out.loss.backward()
        results.append((out.loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (loss3, grads3), (loss2, grads2) = results
    torch.testing.assert_close(loss2, loss3, rtol=1e-6, atol=1e-7)
    for g2, g3 in zip(grads2, grads3):
        torch.testing.assert_close(g2, g3, rtol=1e-5, atol=1e-7)
