"""Sampling on the XLA device (XLA CPU backend): the authors' fixture rollouts, an SDE rollout with
a source and input CFG equal to the CPU one, one compilation per kind of step (a second rollout
compiles nothing), and the bf16 policy. Skipped without torch_xla (tests/xla_util.py)."""

from __future__ import annotations

import pytest
import torch

from tests.xla_util import DEVICE, compiles, fallbacks, on_cpu_then_xla  # noqa: I001 (skips the module first)

import torch_xla

from elf.config import SamplerSettings
from elf.flow.samplers import Source, decode_logits, postprocess, rollout
from elf.precision import network_autocast
from tests.fixtures_util import fixture_model, load_fixture
from tests.test_samplers import a_source, random_elf


def fixture_rollout(name: str, device):
    """The fixture's rollout on ``device``: states, x̂ per step, decoded ids and tokens (CPU)."""
    fx = load_fixture(name)
    cfg, inp = fx["config"]["sampler"], fx["inputs"]
    model = fixture_model(fx).to(device)
    settings = SamplerSettings(method="ode", steps=cfg["num_steps"], sc_cfg=cfg["sc_cfg_w"],
                               input_cfg=cfg["input_cfg"], noise_scale=cfg["noise_scale"])
    source = Source((inp["cond_seq_mask"] > 0).to(device), inp["source_embeddings"].to(device)) \
        if "cond_seq_mask" in inp else None
    states, preds = [], []
    with torch.no_grad():
        z, _ = rollout(model, settings, inp["z_init"].to(device), grid=inp["t_grid"], source=source,
                       record=lambda k, t, z_k, x_k: (states.append(z_k), preds.append(x_k)))
        ids = decode_logits(model, z, settings.sc_cfg).argmax(-1).cpu()
    kw = {} if source is None else dict(source_length=inp["source_length"],
                                        target_length=cfg["tokens_length"])
    tokens = postprocess(ids, cfg["eos_token_id"], cfg["pad_token_id"], **kw)
    return fx, [s.cpu() for s in states], [p.cpu() for p in preds], ids, tokens


@pytest.mark.parametrize("name", ["sampler_ode.pt", "sampler_cond_ode.pt"])
def test_fixture_rollouts_on_xla_equal_the_cpu_ones_and_the_released_code(name):
    (fx, states_cpu, preds_cpu, ids_cpu, _), (_, states, preds, ids, tokens) = \
        on_cpu_then_xla(fixture_rollout, name)
    ex = fx["expected"]
    for k, (z_k, x_k) in enumerate(zip(states, preds)):
        torch.testing.assert_close(z_k, states_cpu[k], rtol=0, atol=1e-5)
        torch.testing.assert_close(x_k, preds_cpu[k], rtol=0, atol=1e-5)
        torch.testing.assert_close(z_k, ex["z"][k + 1], rtol=0, atol=5e-5)  # the CPU parity tolerance
    assert torch.equal(ids, ids_cpu) and torch.equal(ids, ex["decode_ids"])
    assert torch.equal(tokens, ex["tokens"])


def _sde(model, source, seed, device, precision="fp32"):
    s = SamplerSettings(method="sde", steps=4, gamma=1.5, sc_cfg=2.0, input_cfg=2.0, grid="logit_normal")
    g = torch.Generator().manual_seed(seed)
    z_init = s.noise_scale * torch.randn(3, 6, 8, generator=g)
    src = Source(source.mask.to(device), source.embeddings.to(device))
    with torch.no_grad(), network_autocast(device, precision):
        z, denoiser = rollout(model.to(device), s, z_init.to(device), g, source=src)
        ids = decode_logits(model, z, s.sc_cfg).argmax(-1)
    return z, ids, denoiser.calls


def test_an_sde_rollout_with_input_cfg_equals_the_cpu_one_and_compiles_once():
    model, source = random_elf(), a_source()
    z_cpu, ids_cpu, calls = _sde(model, source, 0, "cpu")
    before = fallbacks()
    z, ids, xla_calls = _sde(model, source, 0, DEVICE)
    # four SDE steps at CFG 2 (sc and input) carry the XLA-vs-eager float32 rounding: 1.0e-5 seen
    torch.testing.assert_close(z.cpu(), z_cpu, rtol=0, atol=3e-5)
    assert torch.equal(ids.cpu(), ids_cpu) and xla_calls == calls == 8
    # Other noise, same shapes: every graph is reused from the first rollout on (the RoPE tables
    # are device data from the start, elf/model.py RopeCache, not part of the first step's graph).
    first = compiles()
    for seed in (1, 2, 3):
        z2, ids2, _ = _sde(model, source, seed, DEVICE)
        z2.cpu(), ids2.cpu()
    assert compiles() == first, "later rollouts compiled again"
    assert fallbacks() == before, "an op of the rollout ran on the host"
    assert not torch.equal(z2.cpu(), z.cpu())


def test_the_bf16_policy_on_xla_runs_the_blocks_in_bf16_and_keeps_the_heads_fp32():
    model, source = random_elf(), a_source()
    z32, _, _ = _sde(model, source, 0, DEVICE)
    with torch.no_grad(), network_autocast(DEVICE, "bf16"):
        x = torch.randn(3, 6, 16, generator=torch.Generator().manual_seed(2)).to(DEVICE)
        ones = torch.ones(3, device=DEVICE)
        x_hat, h = model.to(DEVICE)(x, ones * 0.5, ones)
    hlo = torch_xla._XLAC._get_xla_tensors_hlo([x_hat])
    assert x_hat.dtype == torch.float32 and "bf16[" in hlo and "f32[3,6,8]" in hlo
    z16, _, _ = _sde(model, source, 0, DEVICE, "bf16")
    assert z16.dtype == torch.float32
    # bf16 rounding through four SDE steps at CFG 2, no more: 0.245 at most, 2 of 144 above 0.1 seen
    diff = (z16.cpu() - z32.cpu()).abs()
    assert diff.max() < 0.5 and diff.mean() < 0.02 and diff.gt(0.1).float().mean() < 0.05, diff
