"""Samplers of spec §5 (elf/flow/samplers.py) against hand-derived updates.

Most tests drive the samplers with ``StubNet``, a network whose x̂ is a fixed target x* (so every
Euler step has a closed form) and which records every call; a few use a small random ELF network to
check exact identities (γ = 0 SDE = ODE, pinned source positions) on a non-trivial x̂.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from elf.config import SamplerSettings
from elf.flow.samplers import (Source, cut_at_eos, decode_logits, drop_source, postprocess, rollout,
                               time_grid)
from tests.helpers import tiny_model

B, L, D, V = 3, 6, 8, 8


class StubNet(nn.Module):
    """x̂ = x* for every input (x*_uncond instead when the source positions of z are all zero);
    hidden states h = the z half of the input; decode(h) = h @ I (so argmax reads back one-hot ids).
    ``calls`` records (x_in, t, w, mode) of every forward."""

    def __init__(self, x_star: torch.Tensor, x_star_uncond: torch.Tensor | None = None,
                 source_mask: torch.Tensor | None = None):
        super().__init__()
        self.x_star, self.x_star_uncond, self.source_mask = x_star, x_star_uncond, source_mask
        self.calls: list[dict] = []

    def forward(self, x_in, t, w, mode=None, decode_rows=None):
        self.calls.append(dict(x_in=x_in.clone(), t=t.clone(), w=w.clone(),
                               mode=None if mode is None else mode.clone()))
        z = x_in[..., :D]
        out = self.x_star
        if self.x_star_uncond is not None:
            source_zeroed = (z[self.source_mask] == 0).all()
            out = self.x_star_uncond if source_zeroed else self.x_star
        return out.clone(), z.clone()

    def decode(self, h):
        return h @ torch.eye(D, V)


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def settings(**kw) -> SamplerSettings:
    return SamplerSettings(**{"steps": 4, "grid": "uniform", **kw})


def euler(z, x_star, t, t_next, t_eps=0.05):
    """Hand-written ODE step with a fixed x̂ = x*."""
    return z + (t_next - t) * (x_star - z) / max(1 - t, t_eps)


def random_elf(seed=0):
    """A tiny ELF whose denoise head is not zero (initialisation zeroes it, giving x̂ ≡ 0)."""
    model = tiny_model(seed, d=D, vocab_size=V, max_length=L)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.final_layer.linear.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return model.eval()


def a_source() -> Source:
    mask = torch.zeros(B, L, dtype=torch.bool)
    mask[0, :2] = mask[1, :3] = mask[2, :1] = True
    return Source(mask, randn(B, L, D, seed=7))


# --------------------------------------------------------------------------------------------------
# Time grids
# --------------------------------------------------------------------------------------------------

def test_uniform_grid_is_linspace():
    assert torch.equal(time_grid(settings(steps=8)), torch.linspace(0, 1, 9))


def test_logit_normal_grid_hand_computed_sorted_from_0_to_1():
    s = settings(steps=16, grid="logit_normal", grid_mean=-1.5, grid_std=0.8)
    grid = time_grid(s, torch.Generator().manual_seed(3))
    inner = torch.sigmoid(-1.5 + 0.8 * randn(15, seed=3)).sort().values
    assert grid.shape == (17,)
    assert grid[0].item() == 0.0 and grid[-1].item() == 1.0
    torch.testing.assert_close(grid[1:-1], inner, atol=0, rtol=0)
    assert (grid[1:] >= grid[:-1]).all() and ((grid[1:-1] > 0) & (grid[1:-1] < 1)).all()


def test_logit_normal_grid_fresh_per_draw_and_seeded():
    s = settings(steps=8, grid="logit_normal")
    g = torch.Generator().manual_seed(0)
    first, second = time_grid(s, g), time_grid(s, g)
    assert not torch.equal(first, second)
    assert torch.equal(first, time_grid(s, torch.Generator().manual_seed(0)))
    assert torch.equal(time_grid(settings(steps=1, grid="logit_normal"), g), torch.tensor([0., 1.]))


def test_rollout_draws_a_new_grid_per_call():
    """Two rollouts on one generator (two sample batches) see different times."""
    net = StubNet(randn(B, L, D, seed=1))
    s = settings(steps=5, grid="logit_normal")
    g = torch.Generator().manual_seed(0)
    for _ in range(2):
        rollout(net, s, randn(B, L, D, seed=2), g)
    times = torch.stack([c["t"][0] for c in net.calls]).view(2, 5)
    assert not torch.equal(times[0], times[1])
    assert torch.equal(times[0], time_grid(s, torch.Generator().manual_seed(0))[:-1])


# --------------------------------------------------------------------------------------------------
# ODE
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("grid", ["uniform", "logit_normal"])
def test_ode_matches_hand_euler_and_reaches_target(grid):
    x_star, z0 = randn(B, L, D, seed=1), 2.0 * randn(B, L, D, seed=2)
    s = settings(steps=8, grid=grid, sc_cfg=2.5)
    g = torch.Generator().manual_seed(5)
    times = time_grid(s, torch.Generator().manual_seed(5))
    assert 1 - times[-2] > s.t_eps  # so the last step lands on x* (no clamp)
    net, states = StubNet(x_star), []
    z, denoiser = rollout(net, s, z0, g, record=lambda k, t, z_k, x_k: states.append((t, z_k)))
    expected = z0
    for k in range(8):
        t, t_next = float(times[k]), float(times[k + 1])
        call = net.calls[k]
        assert torch.equal(call["t"], torch.full((B,), t))
        assert torch.equal(call["w"], torch.full((B,), 2.5))
        assert call["mode"] is None
        torch.testing.assert_close(call["x_in"][..., :D], expected, atol=1e-6, rtol=1e-6)
        # self-conditioning half: zeros first, then the previous step's x̂
        assert torch.equal(call["x_in"][..., D:], torch.zeros_like(x_star) if k == 0 else x_star)
        expected = euler(expected, x_star, t, t_next)
        assert states[k][0] == t_next
        torch.testing.assert_close(states[k][1], expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(z, x_star, atol=1e-6, rtol=0)
    assert denoiser.calls == len(net.calls) == 8


def test_ode_clamps_one_minus_t_at_t_eps():
    """A step starting at t = 0.99 divides by t_eps = 0.05, not 0.01 (velocity clamp, spec §1)."""
    x_star, z0 = randn(B, L, D, seed=1), randn(B, L, D, seed=2)
    grid = torch.tensor([0.0, 0.99, 1.0])
    z, _ = rollout(StubNet(x_star), settings(steps=2), z0, grid=grid)
    z1 = z0 + 0.99 * (x_star - z0)
    torch.testing.assert_close(z, z1 + 0.01 * (x_star - z1) / 0.05, atol=1e-6, rtol=1e-6)


def test_v_prediction_reads_back_to_x():
    """A network emitting v* = (x* − z)/(1 − t) (prediction "v") reaches x* exactly like x̂ = x*."""
    x_star, z0 = randn(B, L, D, seed=1), 2.0 * randn(B, L, D, seed=2)

    class VNet(StubNet):
        def forward(self, x_in, t, w, mode=None, decode_rows=None):
            z = x_in[..., :D]
            return (x_star - z) / (1 - t[:, None, None]).clamp_min(0.05), z

    z, _ = rollout(VNet(x_star), settings(steps=4), z0, prediction="v")
    torch.testing.assert_close(z, x_star, atol=1e-5, rtol=0)


# --------------------------------------------------------------------------------------------------
# SDE
# --------------------------------------------------------------------------------------------------

def sde_by_hand(z0, x_star, grid, gamma, variant, g, noise_scale=2.0, t_eps=0.05):
    """Spec §5 SDE with a fixed x*: returns the states after each step and the network's times."""
    z, states, times = z0, [], []
    n = len(grid) - 1
    for k in range(n):
        t, t_next = float(grid[k]), float(grid[k + 1])
        if k == n - 1:  # last step: ODE
            times.append(t)
            z = euler(z, x_star, t, t_next, t_eps)
        else:
            alpha = min(max(1 - gamma * (t_next - t), 0.0), 1.0)
            t_b = alpha * t
            z_b = alpha * z + (1 - alpha) * noise_scale * torch.randn(z.shape, generator=g)
            times.append(t_b)
            if variant == "backed_off":
                z = z_b + (t_next - t_b) * (x_star - z_b) / max(1 - t_b, t_eps)
            else:
                z = z + (t_next - t) * (x_star - z) / max(1 - t, t_eps)
        states.append(z)
    return states, times


@pytest.mark.parametrize("variant", ["backed_off", "original"])
def test_sde_step_by_hand(variant):
    x_star, z0 = randn(B, L, D, seed=1), 2.0 * randn(B, L, D, seed=2)
    grid = torch.tensor([0.0, 0.3, 0.7, 0.9, 1.0])
    s = settings(method="sde", gamma=1.0, sde_variant=variant)
    net, states = StubNet(x_star), []
    rollout(net, s, z0, torch.Generator().manual_seed(9), grid=grid,
            record=lambda k, t, z_k, x_k: states.append(z_k))
    expected, times = sde_by_hand(z0, x_star, grid, 1.0, variant, torch.Generator().manual_seed(9))
    for k in range(4):
        assert net.calls[k]["t"][0].item() == pytest.approx(times[k], abs=1e-7)
        torch.testing.assert_close(states[k], expected[k], atol=1e-5, rtol=1e-5)
    # the backed-off network input z_b = α·z + (1 − α)·2ε, not z itself (step 1: α = 0.6)
    assert not torch.allclose(net.calls[1]["x_in"][..., :D], states[0])


def test_sde_variants_differ_after_a_backed_off_step():
    """Step 1 (t = 0.3 → 0.7, γ = 1: α = 0.6, t_b = 0.18): the two variants part ways."""
    x_star, z0 = randn(B, L, D, seed=1), 2.0 * randn(B, L, D, seed=2)
    grid = torch.tensor([0.0, 0.3, 0.7, 1.0])
    out = {}
    for variant in ("backed_off", "original"):
        states = []
        rollout(StubNet(x_star), settings(steps=3, method="sde", gamma=1.0, sde_variant=variant),
                z0, torch.Generator().manual_seed(4), grid=grid,
                record=lambda k, t, z_k, x_k: states.append(z_k))
        out[variant] = states
    g = torch.Generator().manual_seed(4)
    eps0 = torch.randn(z0.shape, generator=g)          # step 0: α = 0.7, t_b = 0
    z_b0 = 0.7 * z0 + 0.3 * 2.0 * eps0
    z1_b = z_b0 + 0.3 * (x_star - z_b0)                # backed-off: from z_b, t_b = 0
    z1_o = z0 + 0.3 * (x_star - z0)                    # original: from z, t = 0
    torch.testing.assert_close(out["backed_off"][0], z1_b, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out["original"][0], z1_o, atol=1e-6, rtol=1e-6)
    eps1 = torch.randn(z0.shape, generator=g)
    z_b1 = 0.6 * z1_b + 0.4 * 2.0 * eps1
    torch.testing.assert_close(out["backed_off"][1], z_b1 + (0.7 - 0.18) * (x_star - z_b1) / 0.82,
                               atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out["original"][1], z1_o + 0.4 * (x_star - z1_o) / 0.7,
                               atol=1e-6, rtol=1e-6)
    assert (out["backed_off"][1] - out["original"][1]).abs().max() > 1e-2


@pytest.mark.parametrize("variant", ["backed_off", "original"])
def test_sde_last_step_is_ode(variant):
    """The last call sees the un-noised state at t = grid[N−1]; only N−1 noises are drawn."""
    x_star, z0 = randn(B, L, D, seed=1), randn(B, L, D, seed=2)
    grid = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0])
    net, states = StubNet(x_star), []
    g = torch.Generator().manual_seed(1)
    rollout(net, settings(method="sde", gamma=2.0, sde_variant=variant), z0, g, grid=grid,
            record=lambda k, t, z_k, x_k: states.append(z_k))
    last = net.calls[-1]
    assert last["t"][0].item() == 0.75
    assert torch.equal(last["x_in"][..., :D], states[-2])
    reference = torch.Generator().manual_seed(1)
    for _ in range(3):
        torch.randn(z0.shape, generator=reference)
    assert torch.equal(torch.rand(4, generator=g), torch.rand(4, generator=reference))


@pytest.mark.parametrize("variant", ["backed_off", "original"])
@pytest.mark.parametrize("conditional", [False, True])
def test_sde_with_gamma_zero_is_the_ode(variant, conditional):
    model = random_elf()
    z0 = 2.0 * randn(B, L, D, seed=3)
    source = a_source() if conditional else None
    runs = {}
    for method in ("ode", "sde"):
        s = settings(steps=6, grid="logit_normal", method=method, gamma=0.0, sde_variant=variant,
                     input_cfg=2.0 if conditional else 1.0)
        states = []
        with torch.no_grad():
            z, _ = rollout(model, s, z0, torch.Generator().manual_seed(0), source=source,
                           record=lambda k, t, z_k, x_k: states.append((z_k, x_k)))
        runs[method] = (z, states)
    # Bit-identical, except that the original variant recomputes v from the guided x̂, which equals
    # the guided v̂ = v_u + s(v_c − v_u) only up to rounding.
    same = torch.equal if not (conditional and variant == "original") else \
        (lambda a, b: torch.allclose(a, b, atol=1e-5, rtol=1e-5))
    assert same(runs["ode"][0], runs["sde"][0])
    for (z_o, x_o), (z_s, x_s) in zip(runs["ode"][1], runs["sde"][1]):
        assert same(z_o, z_s) and same(x_o, x_s)


# --------------------------------------------------------------------------------------------------
# Conditional generation and input-condition CFG
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("input_cfg", [1.0, 2.0])
@pytest.mark.parametrize("method", ["ode", "sde"])
def test_source_positions_stay_bit_identical(input_cfg, method):
    model, source = random_elf(), a_source()
    s = settings(steps=6, grid="logit_normal", method=method, gamma=1.5, input_cfg=input_cfg)
    m = source.mask
    seen = []
    with torch.no_grad():
        z, _ = rollout(model, s, 2.0 * randn(B, L, D, seed=3), torch.Generator().manual_seed(0),
                       source=source, record=lambda k, t, z_k, x_k: seen.append((z_k, x_k)))
    for z_k, x_k in seen:
        assert torch.equal(z_k[m], source.embeddings[m])
        assert torch.equal(x_k[m], source.embeddings[m])
        assert not torch.equal(z_k[~m], source.embeddings[~m])
    assert torch.equal(z[m], source.embeddings[m])


def test_input_cfg_combines_conditional_and_unconditional_by_hand():
    """x̂ = x̂_u + s(x̂_c − x̂_u) off the source, source restored; the unconditional pass sees the
    source zeroed in both halves."""
    source = a_source()
    m = source.mask
    x_c, x_u = randn(B, L, D, seed=1), randn(B, L, D, seed=2)
    net = StubNet(x_c, x_u, m)
    z0 = 2.0 * randn(B, L, D, seed=3)
    grid = torch.tensor([0.0, 0.5, 1.0])
    states = []
    rollout(net, settings(steps=2, input_cfg=2.0), z0, grid=grid, source=source,
            record=lambda k, t, z_k, x_k: states.append((z_k, x_k)))
    assert len(net.calls) == 4
    cond, uncond = net.calls[0]["x_in"], net.calls[1]["x_in"]
    assert torch.equal(cond[..., :D][m], source.embeddings[m])
    assert torch.equal(cond[..., D:][m], source.embeddings[m])   # self-cond half holds the source
    assert (uncond[m] == 0).all()
    assert torch.equal(uncond[..., :D][~m], cond[..., :D][~m])
    x_hat = source.pin(x_u + 2.0 * (x_c - x_u))
    z_start = source.pin(z0)
    v_hat = torch.where(m[..., None], 0.0, (x_hat - z_start) / 1.0)
    torch.testing.assert_close(states[0][1], x_hat, atol=1e-6, rtol=0)
    torch.testing.assert_close(states[0][0], z_start + 0.5 * v_hat, atol=1e-6, rtol=1e-6)
    assert torch.equal(net.calls[2]["x_in"][..., D:], x_hat)      # guided x̂ is the next self-cond


def test_input_cfg_scale_one_equals_the_single_pass():
    """Scale 1 runs one pass per step; the two-pass formula at scale 1 + 1e-6 gives the same states."""
    model, source = random_elf(), a_source()
    z0 = 2.0 * randn(B, L, D, seed=3)
    out = {}
    for scale in (1.0, 1.0 + 1e-6):
        with torch.no_grad():
            out[scale] = rollout(model, settings(steps=4, input_cfg=scale), z0, source=source)
    (z_one, d_one), (z_two, d_two) = out[1.0], out[1.0 + 1e-6]
    assert (d_one.calls, d_two.calls) == (4, 8)
    torch.testing.assert_close(z_one, z_two, atol=1e-4, rtol=1e-4)


class CountingNet(nn.Module):
    """Counts forwards of a wrapped network (the spy the benchmark also uses)."""

    def __init__(self, net):
        super().__init__()
        self.net, self.count = net, 0

    def forward(self, *args, **kwargs):
        self.count += 1
        return self.net(*args, **kwargs)

    def decode(self, h):
        return self.net.decode(h)


@pytest.mark.parametrize("method", ["ode", "sde"])
@pytest.mark.parametrize("conditional,input_cfg,per_step", [
    (False, 1.0, 1), (False, 2.0, 1), (True, 1.0, 1), (True, 2.0, 2)])
def test_network_calls_per_sample(method, conditional, input_cfg, per_step):
    steps = 5
    net = CountingNet(StubNet(randn(B, L, D, seed=1)))
    s = settings(steps=steps, method=method, gamma=1.0, input_cfg=input_cfg)
    z, denoiser = rollout(net, s, randn(B, L, D, seed=2), torch.Generator().manual_seed(0),
                          source=a_source() if conditional else None)
    decode_logits(net, z, s.sc_cfg)
    assert denoiser.calls == per_step * steps
    assert net.count == per_step * steps + 1


# --------------------------------------------------------------------------------------------------
# Decode and post-processing
# --------------------------------------------------------------------------------------------------

def test_decode_logits_runs_decode_mode_at_t1_on_z_and_zeros():
    net = StubNet(randn(B, L, D, seed=1))
    ids = torch.randint(0, V, (B, L), generator=torch.Generator().manual_seed(0))
    z = 3.0 * torch.eye(D)[ids]
    logits = decode_logits(net, z, 2.5)
    assert torch.equal(logits.argmax(-1), ids)
    (call,) = net.calls
    assert torch.equal(call["x_in"], torch.cat([z, torch.zeros_like(z)], -1))
    assert torch.equal(call["t"], torch.ones(B)) and torch.equal(call["mode"], torch.ones(B))
    assert torch.equal(call["w"], torch.full((B,), 2.5))


def test_cut_at_eos():
    ids = torch.tensor([[5, 6, 1, 7, 1], [5, 6, 7, 8, 9], [1, 4, 4, 4, 4]])
    assert cut_at_eos(ids, 1, 0).tolist() == [[5, 6, 0, 0, 0], [5, 6, 7, 8, 9], [0, 0, 0, 0, 0]]


def test_drop_source():
    ids = torch.tensor([[9, 9, 5, 6, 7, 8], [9, 5, 6, 7, 8, 4], [9, 9, 9, 9, 9, 5]])
    out = drop_source(ids, torch.tensor([2, 1, 5]), target_length=3, fill_id=1)
    assert out.tolist() == [[5, 6, 7], [5, 6, 7], [5, 1, 1]]


def test_postprocess_unconditional_and_conditional():
    ids = torch.tensor([[4, 5, 1, 6, 7, 1], [4, 5, 6, 7, 8, 9]])
    assert postprocess(ids, eos_id=1, pad_id=0).tolist() == [[4, 5, 0, 0, 0, 0], [4, 5, 6, 7, 8, 9]]
    cond = postprocess(ids, eos_id=1, pad_id=0, source_length=torch.tensor([1, 3]), target_length=4)
    assert cond.tolist() == [[5, 1, 1, 1], [7, 8, 9, 1]]

