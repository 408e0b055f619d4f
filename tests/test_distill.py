"""Progressive distillation (spec §7): the target against closed forms with stub teachers, the draws,
the loss, the loop's resume with the distillation objective, and the ``elf distill`` stage
(round chaining from EMA weights, tokens.json) on a tiny store.

Closed form used below. A teacher whose k-th sub-step predicts a constant c_k, stepped with
z_{k+1} = z_k + (τ_{k+1} − τ_k)(c_k − z_k)/(1 − τ_k), gives z_K − c-terms that telescope:
z_K = (1 − t_t)/(1 − t_s)·z_s + Σ_k (1 − t_t)·[1/(1 − τ_{k+1}) − 1/(1 − τ_k)]·c_k, hence
x̃ = z_s + (1 − t_s)/Δ·(z_K − z_s) = Σ_k ω_k c_k with
ω_k = (1 − t_s)(1 − t_t)/Δ·[1/(1 − τ_{k+1}) − 1/(1 − τ_k)], Σ ω_k = 1 (and ω = e_{K−1} when t_t = 1).
A fixed-x teacher (every c_k = x) therefore gives x̃ = x for any span and K. The sub-steps divide by
max(1 − τ_k, t_eps) (the authors'), so the closed form holds while every τ_k ≤ 1 − t_eps; the tests of
it use ``UNCLAMPED`` (t_eps 1e-9) to reach spans up to t = 1, and the clamp has its own test.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from elf.cli import main as elf_main
from elf.config import (BudgetSettings, DistillSettings, EmbeddingSettings, ObjectiveSettings,
                        OptimSettings, RunSettings, to_dict)
from elf.embed.store import open_store
from elf.flow.distill import (SMALL_SPAN, DistillDraws, distill_step, distill_target,
                              draw_distill_step, substep_times, teacher_trajectory)
from elf.flow.objective import StepDraws, training_step
from elf.artifacts.records import token_record
from elf.train.checkpoint import model_meta, save_final
from elf.train.loop import CrashForTest, train
from tests.helpers import TensorBatches, tiny_data, tiny_model
from tests.test_store import make_tokens, write_store

ROOT = Path(__file__).resolve().parents[1]
S = ObjectiveSettings()
UNCLAMPED = ObjectiveSettings(t_eps=1e-9)  # the closed form of the module docstring holds exactly


# --------------------------------------------------------------------------------------------------
# Stub teachers
# --------------------------------------------------------------------------------------------------

class ConstantTeacher:
    """Predicts the k-th value of ``values`` at its k-th call (one value: a fixed-x teacher)."""

    def __init__(self, *values: torch.Tensor):
        self.values, self.calls = values, 0

    def __call__(self, x_in, t, w, *rest, **kw):
        value = self.values[min(self.calls, len(self.values) - 1)]
        self.calls += 1
        return value[: len(x_in)].to(x_in.dtype).clone(), None


class RecordingTeacher:
    """x̂ = 0.5·z + 0.25·sc + t + 0.1·w (per row), recording every call's inputs and output."""

    def __init__(self):
        self.calls = []

    def __call__(self, x_in, t, w, *rest, **kw):
        d = x_in.shape[-1] // 2
        z, sc = x_in[..., :d], x_in[..., d:]
        out = 0.5 * z + 0.25 * sc + t[:, None, None] + 0.1 * w[:, None, None]
        self.calls.append(dict(z=z.clone(), sc=sc.clone(), t=t.clone(), w=w.clone(), out=out.clone()))
        return out, None


def _times(B, span, K, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    t_s = torch.rand(B, generator=g, dtype=dtype) * (1 - span)
    inner = torch.rand(B, K - 1, generator=g, dtype=dtype)
    return substep_times(t_s, span, inner)


def _weights(times):
    """ω_k of the module docstring, (B, K), computed from the times alone."""
    t_s, t_t = times[:, :1], times[:, -1:]
    inv = 1 / (1 - times)
    return (1 - t_s) * (1 - t_t) / (t_t - t_s) * (inv[:, 1:] - inv[:, :-1])


# --------------------------------------------------------------------------------------------------
# The target
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("span", [1.0, 0.5, 1 / 16, 1 / 64, 0.3, 2e-3])
@pytest.mark.parametrize("K", [1, 2, 4, 64])
def test_fixed_x_teacher_gives_target_equal_to_that_x(span, K):
    g = torch.Generator().manual_seed(K)
    B, L, d = 5, 3, 4
    x = torch.randn(B, L, d, generator=g, dtype=torch.float64)
    z_s = 2 * torch.randn(B, L, d, generator=g, dtype=torch.float64)
    times = _times(B, span, K, seed=K)
    teacher = ConstantTeacher(x)
    z_t, last = teacher_trajectory(teacher, z_s, torch.zeros_like(z_s), times, torch.ones(B),
                                   UNCLAMPED)
    target = distill_target(z_s, z_t, times[:, 0], times[:, -1], last)
    assert teacher.calls == K
    torch.testing.assert_close(target, x, rtol=0, atol=1e-9)
    assert not torch.allclose(z_t, x) or span == 1.0  # z_t itself is not x unless t_t = 1


@pytest.mark.parametrize("K", [2, 3, 8])
def test_target_is_the_closed_form_average_of_the_substep_predictions(K):
    B, L, d = 4, 2, 3
    g = torch.Generator().manual_seed(0)
    values = [torch.randn(B, L, d, generator=g, dtype=torch.float64) for _ in range(K)]
    z_s = torch.randn(B, L, d, generator=g, dtype=torch.float64)
    times = _times(B, 0.25, K, seed=K)
    z_t, last = teacher_trajectory(ConstantTeacher(*values), z_s, torch.zeros_like(z_s), times,
                                   torch.ones(B), UNCLAMPED)
    target = distill_target(z_s, z_t, times[:, 0], times[:, -1], last)
    omega = _weights(times)
    torch.testing.assert_close(omega.sum(1), torch.ones(B, dtype=torch.float64))
    expected = sum(omega[:, k, None, None] * values[k] for k in range(K))
    torch.testing.assert_close(target, expected, rtol=0, atol=1e-10)
    torch.testing.assert_close(last, values[-1])


def test_full_span_target_is_the_last_substep_prediction():
    """Round 5 (one student step, Δ = 1, t_s = 0): the teacher's last Euler step lands on its x̂."""
    B, L, d, K = 3, 2, 3, 6
    g = torch.Generator().manual_seed(1)
    values = [torch.randn(B, L, d, generator=g, dtype=torch.float64) for _ in range(K)]
    times = substep_times(torch.zeros(B, dtype=torch.float64), 1.0,
                          torch.rand(B, K - 1, generator=g, dtype=torch.float64))
    z_s = torch.randn(B, L, d, generator=g, dtype=torch.float64)
    z_t, last = teacher_trajectory(ConstantTeacher(*values), z_s, torch.zeros_like(z_s), times,
                                   torch.ones(B), UNCLAMPED)
    torch.testing.assert_close(distill_target(z_s, z_t, times[:, 0], times[:, -1], last),
                               values[-1], rtol=0, atol=1e-12)


def test_small_span_fallback_triggers_below_1e_3_only():
    B, L, d, K = 4, 2, 3, 2
    g = torch.Generator().manual_seed(2)
    values = [torch.randn(B, L, d, generator=g, dtype=torch.float64) for _ in range(K)]
    z_s = torch.randn(B, L, d, generator=g, dtype=torch.float64)
    t_s = torch.tensor([0.2, 0.2, 0.5, 0.5], dtype=torch.float64)
    spans = torch.tensor([0.9e-3, 1.1e-3, 0.0, 0.5e-3], dtype=torch.float64)
    times = torch.stack([t_s, t_s + spans / 2, t_s + spans], 1)
    z_t, last = teacher_trajectory(ConstantTeacher(*values), z_s, torch.zeros_like(z_s), times,
                                   torch.ones(B), S)
    target = distill_target(z_s, z_t, times[:, 0], times[:, -1], last)
    fallback = spans < 1e-3
    assert SMALL_SPAN == 1e-3 and fallback.tolist() == [True, False, True, True]
    assert torch.isfinite(target).all()
    # the authors' fallback: the teacher's LAST sub-step prediction, not its first
    torch.testing.assert_close(target[fallback], values[-1][fallback], rtol=0, atol=0)
    assert not torch.allclose(values[0][fallback], values[-1][fallback])
    omega = _weights(times[1:2])
    expected = omega[:, 0, None, None] * values[0][1:2] + omega[:, 1, None, None] * values[1][1:2]
    torch.testing.assert_close(target[1:2], expected, rtol=0, atol=1e-9)
    assert not torch.allclose(target[1], values[0][1])


def test_teacher_substeps_divide_by_max_one_minus_tau_and_t_eps():
    """Sub-steps from τ = 0.9 (1 − τ = 0.1) then τ = 0.96 (1 − τ = 0.04 < t_eps = 0.05), by hand."""
    g = torch.Generator().manual_seed(4)
    c0, c1, z_s = (torch.randn(2, 3, 4, generator=g, dtype=torch.float64) for _ in range(3))
    times = torch.tensor([[0.9, 0.96, 0.98]] * 2, dtype=torch.float64)
    z_t, last = teacher_trajectory(ConstantTeacher(c0, c1), z_s, torch.zeros_like(z_s), times,
                                   torch.ones(2), S)
    z_1 = z_s + 0.06 * (c0 - z_s) / 0.1
    expected = z_1 + 0.02 * (c1 - z_1) / 0.05
    torch.testing.assert_close(z_t, expected, rtol=0, atol=1e-12)
    assert not torch.allclose(z_t, z_1 + 0.02 * (c1 - z_1) / 0.04)  # the unclamped step
    torch.testing.assert_close(last, c1)


# --------------------------------------------------------------------------------------------------
# Draws
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("steps, K", [(16, 4), (2, 32), (1, 64), (1, 1)])
def test_draws_follow_spec_7(steps, K):
    B, L, d = 64, 3, 2
    rounds = DistillSettings(student_steps=steps, teacher_substeps=K)
    draws = draw_distill_step((B, L, d), S, rounds, torch.Generator().manual_seed(7))
    span = 1 / steps
    assert draws.times.shape == (B, K + 1) and draws.substeps == K
    torch.testing.assert_close(draws.t_t - draws.t_s, torch.full((B,), span), rtol=0, atol=1e-6)
    assert (draws.times.diff(dim=1) >= 0).all()
    assert (draws.t_s >= 0).all() and (draws.t_s <= 1 - span + 1e-7).all()
    # t_s = sigmoid(N(−1.5, 0.8²))·(1 − Δ): the second draw of the stream (after the decode flags).
    g = torch.Generator().manual_seed(7)
    decode = torch.rand(B, generator=g) < 0.2
    expected_t_s = torch.sigmoid(-1.5 + 0.8 * torch.randn(B, generator=g)) * (1 - span)
    assert torch.equal(draws.decode_row.bool(), decode)
    torch.testing.assert_close(draws.t_s, expected_t_s)
    assert ((draws.w >= 0.5 - 1e-6) & (draws.w <= 5 + 1e-6)).all()
    again = draw_distill_step((B, L, d), S, rounds, torch.Generator().manual_seed(7))
    assert all(torch.equal(getattr(draws, f.name), getattr(again, f.name))
               for f in dataclasses.fields(DistillDraws))


# --------------------------------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------------------------------

def _draws(B, L, d, K=4, steps=4, seed=0, decode=(1, 0, 0, 1, 0, 0), self_cond=(0, 1, 1, 0, 0, 1)):
    draws = draw_distill_step((B, L, d), S, DistillSettings(steps, K),
                              torch.Generator().manual_seed(seed))
    draws.decode_row = torch.tensor(decode, dtype=torch.float32)
    draws.use_self_cond = torch.tensor(self_cond, dtype=torch.float32)
    return draws


def test_teacher_calls_inputs_and_chained_self_conditioning():
    B, L, d, K = 6, 12, 16, 4
    data = tiny_data(B)
    draws = _draws(B, L, d, K)
    teacher = RecordingTeacher()
    out = distill_step(tiny_model(), teacher, data, draws, S)
    calls = teacher.calls
    rows = torch.tensor([1, 2, 4, 5])  # the non-decode rows
    assert len(calls) == 1 + K and out.parts["teacher_calls"] == 1 + K
    z_s = out.parts["z_s"][rows]
    torch.testing.assert_close(z_s, draws.t_s[rows, None, None] * data["x"][rows]
                               + (1 - draws.t_s[rows, None, None]) * 2.0 * draws.eps[rows])
    # Call 0: the self-conditioning estimate, zero self-cond at (z_s, t_s).
    assert torch.equal(calls[0]["sc"], torch.zeros_like(z_s))
    sc = calls[0]["out"] * draws.use_self_cond[rows, None, None]
    for k, call in enumerate(calls[1:]):
        torch.testing.assert_close(call["t"], draws.times[rows, k])
        torch.testing.assert_close(call["w"], draws.w[rows])
        torch.testing.assert_close(call["sc"], sc)      # chained: the previous sub-step's x̂
        sc = call["out"]
    torch.testing.assert_close(calls[1]["z"], z_s)
    # The student's self-cond half: x̂₀ on self-cond rows, zeros on the others and on decode rows.
    half = out.parts["sc_half"]
    torch.testing.assert_close(half[rows], calls[1]["sc"])
    assert torch.equal(half[torch.tensor([0, 3])], torch.zeros(2, L, d))
    # Euler sub-steps, recomputed from the recorded predictions.
    z = z_s
    for k, call in enumerate(calls[1:]):
        h = (draws.times[rows, k + 1] - draws.times[rows, k])[:, None, None]
        z = z + h * (call["out"] - z) / (1 - draws.times[rows, k]).clamp_min(S.t_eps)[:, None, None]
    ratio = ((1 - draws.t_s[rows]) / (draws.t_t[rows] - draws.t_s[rows]))[:, None, None]
    torch.testing.assert_close(out.parts["target"][rows], z_s + ratio * (z - z_s))


def test_fixed_x_teacher_through_the_step_and_per_example_loss_on_padded_rows():
    """The authors' averaging: each example's masked mean over its tokens, then the plain mean over
    the batch's examples, computed here token by token (rows 0 (decode) and 1 (distill) padded)."""
    B, L, d = 6, 12, 16
    data = tiny_data(B)
    data["attention_mask"][0, -3:] = 0  # padding is excluded from both losses
    data["attention_mask"][1, -5:] = 0
    x_fixed = torch.randn(1, L, d, generator=torch.Generator().manual_seed(3)).expand(B, L, d)
    draws = _draws(B, L, d, K=8, steps=2)
    student = tiny_model(seed=1)
    out = distill_step(student, ConstantTeacher(x_fixed), data, draws, S)
    rows = out.parts["distill_rows"]
    torch.testing.assert_close(out.parts["target"][rows], x_fixed[rows], rtol=0, atol=2e-5)
    x_hat, target, ce = out.parts["x_hat"], out.parts["target"], out.parts["ce_per_token"]
    per_example = []
    for b in range(B):
        valid = [i for i in range(L) if data["attention_mask"][b, i] == 1]
        if draws.decode_row[b] > 0:
            values = [float(ce[b, i]) for i in valid]
        else:
            values = [float((x_hat[b, i] - target[b, i]).double().pow(2).mean()) for i in valid]
        per_example.append(sum(values) / len(values))
    assert out.loss.item() == pytest.approx(sum(per_example) / B, rel=1e-6)
    decode = [e for e, dec in zip(per_example, draws.decode_row) if dec > 0]
    assert out.ce_loss.item() == pytest.approx(sum(decode) / len(decode), rel=1e-6)
    # Pooling every token over one Σ mask (training's rule) gives another number on this batch.
    mask, dec = data["attention_mask"].float(), draws.decode_row[:, None]
    mse = (x_hat - target).pow(2).mean(-1)
    pooled = ((ce * mask * dec).sum() + (mse * mask * (1 - dec)).sum()) / mask.sum()
    assert abs(pooled.item() - out.loss.item()) > 1e-3 * out.loss.item()
    # Slices normalised by the whole batch's rows (the loop's micro-batches) sum to the whole.
    halves = [slice(0, 3), slice(3, 6)]
    total = sum(distill_step(student, ConstantTeacher(x_fixed), {k: v[h] for k, v in data.items()},
                             DistillDraws(**{f.name: getattr(draws, f.name)[h]
                                             for f in dataclasses.fields(draws)}),
                             S, batch_rows=B).loss for h in halves)
    torch.testing.assert_close(total, out.loss)
    # Decode rows: exactly the training objective's cross-entropy on the same draws.
    step_draws = StepDraws(draws.decode_row, draws.t_s, draws.eps, draws.lam, draws.eps_decode,
                           draws.use_self_cond, draws.w, draws.label_drop)
    trained = training_step(student, data, step_draws, S)
    decode = draws.decode_row > 0
    torch.testing.assert_close(out.parts["ce_per_token"][decode],
                               trained.parts["ce_per_token"][decode])
    # Gradient reaches the student only.
    out.loss.backward()
    assert student.final_layer.linear.weight.grad.abs().sum() > 0


def test_real_teacher_gets_no_gradient_and_student_input_is_z_s():
    B, L, d = 6, 12, 16
    data = tiny_data(B)
    teacher, student = tiny_model(seed=2), tiny_model(seed=1)
    for p in teacher.parameters():  # non-zero output head, so the teacher's x̂ depends on its input
        torch.nn.init.normal_(p, std=0.05)
    draws = _draws(B, L, d, K=3)
    out = distill_step(student, teacher, data, draws, S)
    out.loss.backward()
    assert all(p.grad is None for p in teacher.parameters())
    rows = out.parts["distill_rows"]
    with torch.no_grad():
        direct, _ = student(torch.cat([out.parts["z_s"], out.parts["sc_half"]], -1)[rows],
                            draws.t_s[rows], draws.w[rows])
    torch.testing.assert_close(out.parts["x_hat"][rows], direct, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------------
# The loop with the distillation objective: exact resume
# --------------------------------------------------------------------------------------------------

def _distill_loop(tmp, data, steps, crash=None):
    teacher = tiny_model(seed=5)
    for p in teacher.parameters():
        torch.nn.init.normal_(p, std=0.05)
    teacher.requires_grad_(False)
    rounds = DistillSettings(student_steps=4, teacher_substeps=2)
    run = RunSettings(dataset="toy", kind="distill", teacher="t", distill=rounds,
                      optim=OptimSettings(blr=0.05, ema_warmup=True),
                      budget=BudgetSettings(batch_size=4, steps=steps, log_every=1,
                                            checkpoint_every=2))
    model = tiny_model(seed=5)
    model.load_state_dict(teacher.state_dict())
    train(model, run, TensorBatches(data, 4), tmp, {"run": "pd"}, loss_covers_padding=False,
          seq_shape=(12, 16), progress=False, crash_after_step=crash,
          draw_fn=lambda shape, gen: draw_distill_step(shape, S, rounds, gen),
          step_fn=lambda net, batch, draws, denom: distill_step(net, teacher, batch, draws, S,
                                                                batch_rows=4))


def test_distillation_in_the_training_loop_resumes_bitwise(tmp_path):
    data = tiny_data(8)
    _distill_loop(tmp_path / "full", data, 5)
    with pytest.raises(CrashForTest):
        _distill_loop(tmp_path / "resumed", data, 5, crash=3)
    _distill_loop(tmp_path / "resumed", data, 5)
    for name in ("model.safetensors", "ema.safetensors"):
        full, resumed = load_file(tmp_path / "full" / name), load_file(tmp_path / "resumed" / name)
        assert all(torch.equal(full[k], resumed[k]) for k in full), name
    log = [json.loads(line) for line in open(tmp_path / "full" / "train_log.jsonl")]
    assert [r["step"] for r in log] == [1, 2, 3, 4, 5]
    assert all(math.isfinite(r["loss"]) and r["l2_loss"] > 0 for r in log)


# --------------------------------------------------------------------------------------------------
# The stage: tiny store, tiny checkpoints, round chaining, tokens.json
# --------------------------------------------------------------------------------------------------

L_TINY, D_TINY = 6, 8
EMB = EmbeddingSettings(kind="encoder", normalization="scalar")


@pytest.fixture(scope="module")
def stage_inputs(tmp_path_factory):
    """A finished store (L 6, d 8), a 64-token tokenizer and a teacher checkpoint whose EMA weights
    differ from its raw weights."""
    from elf.data.tokenizer import train_tokenizer
    tmp = tmp_path_factory.mktemp("distill_stage")
    write_store(tmp / "train.zarr", make_tokens(n=16, length=L_TINY, seed=1), dtype="float32")
    tok = train_tokenizer([f"the quick brown fox jumps over the lazy dog {i}" for i in range(50)], 64)
    tok.save_pretrained(tmp / "tokenizer")
    vocab = len(tok)
    teacher_run = RunSettings(dataset="owt", budget=BudgetSettings(batch_size=8, steps=100))
    save_checkpoint(tmp / "teacher", _weights_of(seed=10, vocab=vocab), _weights_of(seed=11, vocab=vocab),
                    teacher_run, vocab)
    return tmp, vocab


def _tiny_cfg(vocab):
    return dict(d=D_TINY, max_length=L_TINY, vocab_size=vocab)


def _weights_of(seed, vocab):
    model = tiny_model(seed=seed, **_tiny_cfg(vocab))
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=g) * 0.05 for k, v in model.state_dict().items()}


def save_checkpoint(path, model_state, ema_state, run, vocab):
    model = tiny_model(**_tiny_cfg(vocab))
    meta = model_meta(model.cfg, run=to_dict(run), embedding=to_dict(EMB),
                      dataset={"task": "unconditional"})
    save_final(path, model_state, ema_state, meta)


def _settings(steps=3, blr=0.01):
    run = RunSettings(dataset="owt", kind="distill", teacher="base", init_from="base",
                      distill=DistillSettings(student_steps=4, teacher_substeps=2),
                      optim=OptimSettings(blr=blr, ema_warmup=True),
                      budget=BudgetSettings(batch_size=4, steps=steps, log_every=1,
                                            checkpoint_every=100))
    dataset = {"task": "unconditional", "source": "embedded", "name": "owt", "max_length": L_TINY}
    return json.dumps(dict(run=to_dict(run), dataset=dataset, embedding=to_dict(EMB), sizes={}))


def _distill(tmp, init, out, settings):
    return elf_main(["distill", "--settings", settings, "--teacher", str(tmp / "teacher"),
                     "--init", str(init), "--store", str(tmp / "train.zarr"),
                     "--tokenizer", str(tmp / "tokenizer"), "--out", str(out), "--no-progress"])


def _close(state, reference):
    return all(torch.allclose(state[k], reference[k], rtol=1e-6, atol=1e-20) for k in reference)


def test_stage_end_to_end_writes_checkpoint_log_and_tokens(stage_inputs, tmp_path):
    from elf.train.checkpoint import load_model
    tmp, _ = stage_inputs
    assert _distill(tmp, tmp / "teacher", tmp_path / "pd_r1", _settings(steps=3)) == 0
    out = tmp_path / "pd_r1"
    model, meta = load_model(out)
    assert meta["run"]["kind"] == "distill" and meta["teacher_sha256"] and meta["init_sha256"]
    # provenance names the store it distilled on (the store writes identity_sha256)
    identity = open_store(tmp / "train.zarr").attrs["identity_sha256"]
    assert len(identity) == 64 and meta["store_identity"] == identity
    assert meta["precision"] == "fp32"  # no precision in --settings: the fp32 default
    log = [json.loads(line) for line in open(out / "train_log.jsonl")]
    assert [r["step"] for r in log] == [1, 2, 3] and all(math.isfinite(r["loss"]) for r in log)
    tokens = json.loads((out / "tokens.json").read_text())
    assert tokens["tokens_seen"] == 3 * 4 * L_TINY and tokens["round"] == 1
    assert tokens["teacher_tokens_seen"] == 100 * 8 * L_TINY
    assert tokens["total_tokens_seen"] == 100 * 8 * L_TINY + 3 * 4 * L_TINY
    assert not (out / "resume").exists()


def test_round_k_initialises_from_round_k_minus_1_ema(stage_inputs, tmp_path):
    """With a vanishing learning rate the student's final weights are its initialisation: round 1's
    are the teacher's EMA (not its raw weights), round 2's are round 1's EMA."""
    tmp, vocab = stage_inputs
    settings = _settings(steps=2, blr=1e-30)
    r1, r2 = tmp_path / "pd_r1", tmp_path / "pd_r2"
    assert _distill(tmp, tmp / "teacher", r1, settings) == 0
    teacher_ema = load_file(tmp / "teacher" / "ema.safetensors")
    teacher_raw = load_file(tmp / "teacher" / "model.safetensors")
    student1 = load_file(r1 / "model.safetensors")
    assert _close(student1, teacher_ema) and not _close(student1, teacher_raw)
    # Pretend round 1 trained: give its EMA distinct weights (its raw weights stay as they are).
    meta1 = json.loads((r1 / "config.json").read_text())
    save_final(r1, student1, _weights_of(seed=12, vocab=vocab), meta1)
    assert _distill(tmp, r1, r2, settings) == 0
    student2 = load_file(r2 / "model.safetensors")
    assert _close(student2, load_file(r1 / "ema.safetensors")) and not _close(student2, student1)
    tokens = json.loads((r2 / "tokens.json").read_text())
    per_round = 2 * 4 * L_TINY
    assert tokens["round"] == 2 and tokens["distill_tokens_total"] == 2 * per_round
    assert [r["run"] for r in tokens["rounds"]] == ["pd_r1", "pd_r2"]


def test_stage_refuses_a_train_run_and_a_foreign_embedding(stage_inputs, tmp_path, capsys):
    tmp, _ = stage_inputs
    blob = json.loads(_settings())
    blob["run"]["kind"] = "train"
    assert _distill(tmp, tmp / "teacher", tmp_path / "x", json.dumps(blob)) == 2
    assert "kind 'distill'" in capsys.readouterr().err
    blob = json.loads(_settings())
    blob["embedding"]["std"] = 0.5
    assert _distill(tmp, tmp / "teacher", tmp_path / "x", json.dumps(blob)) == 2
    assert "embedding settings" in capsys.readouterr().err


def test_token_record_accumulates_the_chain():
    teacher_meta = {"run": {"budget": {"steps": 1000, "batch_size": 8}}, "model": {"max_length": 64}}
    run = {"budget": {"steps": 250, "batch_size": 8}, "teacher": "base",
           "distill": {"student_steps": 16, "teacher_substeps": 4}}
    r1 = token_record("pd_r1", run, 64, teacher_meta, None)
    r2 = token_record("pd_r2", {**run, "distill": {"student_steps": 8, "teacher_substeps": 8}}, 64,
                      teacher_meta, r1)
    assert r1["tokens_seen"] == 250 * 8 * 64 and r1["round"] == 1
    assert r2["distill_tokens_total"] == 2 * 250 * 8 * 64 and r2["round"] == 2
    assert r2["total_tokens_seen"] == (1000 + 500) * 8 * 64
    assert r2["ratio_to_teacher"] == pytest.approx(1.5)


# --------------------------------------------------------------------------------------------------
# The DAG: the round chain is wired from the config
# --------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_dag_chains_rounds_from_the_previous_students_ema(tmp_path):
    cfg = yaml.safe_load((ROOT / "config" / "ci.yaml").read_text())
    cfg["results"], cfg["reports"] = str(tmp_path / "results"), str(tmp_path / "reports")
    for k, (steps, sub) in enumerate([(16, 4), (8, 8), (4, 16)], start=1):
        cfg["runs"][f"pd_r{k}"] = dict(kind="distill", teacher="base",
                                       init_from="base" if k == 1 else f"pd_r{k - 1}",
                                       distill=dict(student_steps=steps, teacher_substeps=sub))
    configfile = tmp_path / "cfg.yaml"
    configfile.write_text(yaml.safe_dump(cfg))
    target = f"{tmp_path}/results/runs/pd_r3/tokens.json"
    proc = subprocess.run(["snakemake", "-n", "-p", "--cores", "1", target,  # target first:
                           "--configfile", str(configfile)],         # --configfile takes a list
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = f"{tmp_path}/results/runs"
    commands = [line for line in proc.stdout.splitlines() if "elf distill --settings" in line]
    assert len(commands) == 3
    for k in (1, 2, 3):
        init = "base" if k == 1 else f"pd_r{k - 1}"
        assert any(f"--teacher {runs}/base --init {runs}/{init} " in c and f"--out {runs}/pd_r{k}" in c
                   for c in commands), (k, commands)


def test_init_checkpoint_whose_model_settings_differ_is_refused_by_name():
    """A distill run's `model` settings must describe its init checkpoint (the student keeps that
    network's shape): one in-context token per control against a checkpoint trained with four."""
    from elf.artifacts.names import RUN_MODEL, RUN_SETTINGS
    from elf.config import ModelSettings
    from elf.errors import ElfError
    from elf.stages.distill import check_compatible

    four, one = (to_dict(ModelSettings(size="tiny", control_tokens=n)) for n in (4, 1))
    meta = {RUN_MODEL: {"d": 8, "max_length": 6, "vocab_size": 20, "decode_head": True},
            RUN_SETTINGS: {"model": four}}
    shape = dict(d=8, seq_len=6, vocab=20, embedding={})
    check_compatible("init", meta, **shape, model_settings=four)        # the same settings pass
    with pytest.raises(ElfError, match=r"--init: .* differ .* in control_tokens: the student keeps"):
        check_compatible("init", meta, **shape, model_settings=one)
