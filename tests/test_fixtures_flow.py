"""Parity with the authors' released code (issue 10): network, objective and samplers on the fixtures.

Tolerances are the fixtures README's. The optimiser half of the training files is checked in
``test_fixtures_step.py``.
"""

import pytest
import torch

from elf.config import ObjectiveSettings, SamplerSettings
from elf.flow.objective import StepDraws, training_step
from elf.flow.samplers import Source, decode_logits, postprocess, rollout
from tests.fixtures_util import fixture_model, load_fixture


def close(a, b, atol, rtol=0.0):
    torch.testing.assert_close(a, b, atol=atol, rtol=rtol)


def fixture_inputs(fx: dict, sc_cfg_target: str = "main_forward", t_eps: float | None = None):
    """A training fixture's batch, recorded draws and objective settings, as our step takes them."""
    obj = fx["config"]["objective"]
    b, dr = fx["batch"], fx["draws"]
    batch = dict(x=b.get("x0_encoded", b["x0"]), input_ids=b["input_ids"],
                 attention_mask=b["attention_mask"], cond_seq_mask=b["cond_seq_mask"])
    if "x0_encoded" in b:
        # Dropped rows of x0 hold the source-blind encoding (source zeroed), as x_nosource would.
        batch["x_nosource"] = b["x0"]
    label_drop = dr.get("label_drop", torch.zeros(dr["t"].shape[0], dtype=torch.bool))
    draws = StepDraws(dr["decode_row"], dr["t"], dr["eps"], dr["lambda"], dr["eps_decode"],
                      dr["use_self_cond"], dr["w"], label_drop)
    settings = ObjectiveSettings(
        t_mean=obj["t_p_mean"], t_std=obj["t_p_std"], noise_scale=obj["denoiser_noise_scale"],
        t_eps=obj["t_eps"] if t_eps is None else t_eps, decode_prob=obj["decoder_prob"],
        decode_noise_scale=obj["decoder_noise_scale"], self_cond_prob=obj["self_cond_prob"],
        sc_cfg_min=obj["sc_cfg_min"], sc_cfg_max=obj["sc_cfg_max"],
        label_drop_prob=obj["label_drop_prob"], sc_cfg_target=sc_cfg_target)
    return batch, draws, settings


def replay_step(name: str, sc_cfg_target: str = "main_forward", t_eps: float | None = None):
    """Run our objective on a training fixture with its recorded draws; returns (fx, model, output)."""
    fx = load_fixture(name)
    obj = fx["config"]["objective"]
    model = fixture_model(fx)
    batch, draws, settings = fixture_inputs(fx, sc_cfg_target, t_eps)
    out = training_step(model, batch, draws, settings, loss_covers_padding=obj["loss_covers_padding"])
    return fx, model, out


@pytest.mark.parametrize("name", ["train_step_uncond.pt", "train_step_cond.pt"])
@pytest.mark.parametrize("sc_cfg_target", ["main_forward", "extra_forward"])
def test_training_step_matches_released_code(name, sc_cfg_target):
    fx, model, out = replay_step(name, sc_cfg_target)
    ex, p = fx["expected"], out.parts
    for key in ("z_t", "z_decode", "sc_half"):
        close(p[key], ex[key], atol=1e-5, rtol=1e-5)
    for key in ("x_hat_first", "x_hat", "logits_decode_rows"):
        close(p[key], ex[key], atol=1e-5, rtol=1e-5)
    close(p["t_main"], ex["t_main"], atol=0)
    close(p["loss_mask"], ex["loss_mask"], atol=0)
    assert torch.equal(p["decode_rows"], ex["decode_rows"])
    denoise = fx["draws"]["decode_row"] == 0
    close(p["v_target"], ex["v_target"], atol=1e-4, rtol=1e-5)
    close(p["v_star"][denoise], ex["v_star"][denoise], atol=1e-4, rtol=1e-5)
    close(p["l2_per_token"][denoise], ex["l2_per_token"][denoise], atol=1e-4, rtol=1e-5)
    rows = ex["decode_rows"]
    close(p["ce_per_token"][rows], ex["ce_per_token"][rows], atol=1e-5, rtol=1e-5)
    for key, ours in (("loss", out.loss), ("ce_loss", out.ce_loss), ("l2_loss", out.l2_loss)):
        assert ours.item() == pytest.approx(ex[key], rel=1e-5), key
    out.loss.backward()
    grad_norm = torch.sqrt(sum(q.grad.pow(2).sum() for q in model.parameters()))
    assert grad_norm.item() == pytest.approx(ex["grad_norm"], rel=1e-4)
    for pname, param in model.named_parameters():
        assert param.grad.norm().item() == pytest.approx(ex["grad_norm_per_param"][pname], rel=1e-4,
                                                        abs=1e-12), pname


def test_dropping_t_eps_clamp_is_caught():
    """The one-line deviation 'no t_eps clamp' moves the conditional loss (clamped row 6)."""
    fx, _, out = replay_step("train_step_cond.pt", t_eps=1e-9)
    assert out.loss.item() != pytest.approx(fx["expected"]["loss"], rel=1e-5)


def replay_sampler(name: str, t_eps: float = 0.05):
    fx = load_fixture(name)
    cfg, inp = fx["config"]["sampler"], fx["inputs"]
    model = fixture_model(fx)
    settings = SamplerSettings(method="ode", steps=cfg["num_steps"], sc_cfg=cfg["sc_cfg_w"],
                               input_cfg=cfg["input_cfg"], noise_scale=cfg["noise_scale"], t_eps=t_eps)
    source = Source(inp["cond_seq_mask"] > 0, inp["source_embeddings"]) \
        if "cond_seq_mask" in inp else None
    states, preds, calls = [], [], []
    original_forward = model.forward

    def spy(x, t, w, mode=None):
        out = original_forward(x, t, w, mode)
        calls.append(dict(x=x, t=t, w=w, x_hat_raw=out[0]))
        return out

    model.forward = spy
    with torch.no_grad():
        z, denoiser = rollout(model, settings, inp["z_init"], grid=inp["t_grid"], source=source,
                              record=lambda k, t, z_k, x_k: (states.append(z_k), preds.append(x_k)))
    model.forward = original_forward
    ids = decode_logits(model, z, settings.sc_cfg).argmax(-1)
    if source is None:
        tokens = postprocess(ids, cfg["eos_token_id"], cfg["pad_token_id"])
    else:
        tokens = postprocess(ids, cfg["eos_token_id"], cfg["pad_token_id"],
                             source_length=inp["source_length"], target_length=cfg["tokens_length"])
    return fx, states, preds, calls, ids, tokens, denoiser


@pytest.mark.parametrize("name", ["sampler_ode.pt", "sampler_cond_ode.pt"])
def test_sampler_rollout_matches_released_code(name):
    fx, states, preds, calls, ids, tokens, denoiser = replay_sampler(name)
    ex = fx["expected"]
    for k, (z_k, x_k) in enumerate(zip(states, preds)):
        close(z_k, ex["z"][k + 1], atol=5e-5)
        close(x_k, ex["x_hat"][k], atol=5e-5)
    for ours, ref in zip(calls, ex["first_steps"]):
        close(ours["x"], ref["x"], atol=5e-5)
        close(ours["t"], ref["t"], atol=0)
        close(ours["w"], ref["w"], atol=0)
        close(ours["x_hat_raw"], ref["x_hat_raw"], atol=5e-5)
    assert torch.equal(ids, ex["decode_ids"])
    assert torch.equal(tokens, ex["tokens"])
    per_step = 1 if fx["config"]["sampler"]["input_cfg"] == 1 else 2
    assert denoiser.calls == per_step * fx["config"]["sampler"]["num_steps"]


def test_sampler_without_t_eps_clamp_is_caught():
    fx, states, *_ = replay_sampler("sampler_ode.pt", t_eps=1e-9)
    assert (states[-1] - fx["expected"]["z"][8]).abs().max() > 0.1
