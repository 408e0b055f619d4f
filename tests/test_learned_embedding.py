"""Embedding kind ``learned`` (R10, elf/train/learned.py): a table trained with the flow, tied to the
unembedding and renormalised after every step; its gradients, decode, checkpoint and ``elf train``."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
import torch.nn.functional as F

from elf.cli import main
from elf.config import DatasetSettings, EmbeddingSettings, RunSettings, to_dict
from elf.train.learned import ROW_RMS, TiedTable, learned_step, renormalise_rows
from elf.flow.objective import draw_step
from elf.train.checkpoint import load_model
from elf.train.loop import train
from tests.helpers import TINY, TensorBatches, tiny_data, tiny_model, tiny_run
from tests.test_sample_stage import build_tokenizer

B, L, D, V = 4, TINY["max_length"], TINY["d"], TINY["vocab_size"]


def token_data(n: int = B, seed: int = 0) -> dict:
    """Token-only rows (the learned table makes x): tiny_data without its fixed-table x."""
    return {k: v for k, v in tiny_data(n, seed=seed).items() if k != "x"}


def with_objective(run: RunSettings, **changes) -> RunSettings:
    return dataclasses.replace(run, objective=dataclasses.replace(run.objective, **changes))


def table_gradient(step, model, data, draws) -> tuple[torch.Tensor, torch.Tensor]:
    """(gradient of the (V, d) table, loss) of one step."""
    model.zero_grad(set_to_none=True)
    out = step(model, data, draws, None)
    out.loss.backward()
    return model.unembed_kernel.grad.t().clone(), out.loss.detach()


# ---- the table ------------------------------------------------------------------------------------

def test_table_is_the_unembedding_seeded_and_unit_rms():
    model = tiny_model()
    table = TiedTable(model)
    table.init_(seed=5)
    assert table.rows.shape == (V, D)
    assert table.rows.data_ptr() == model.unembed_kernel.data_ptr()      # one tensor, two roles
    torch.testing.assert_close(table.rows.norm(dim=1), torch.full((V,), math.sqrt(D)))  # RMS 1
    again = TiedTable(tiny_model(seed=3))
    again.init_(seed=5)
    assert torch.equal(again.rows, table.rows)                            # the seed alone decides
    with pytest.raises(ValueError, match="decode_head"):
        TiedTable(tiny_model(decode_head=False))


def test_renormalise_rescales_every_row_to_unit_rms_by_hand():
    model = tiny_model()
    table = TiedTable(model)
    with torch.no_grad():
        table.rows.zero_()
        table.rows[0, :2] = torch.tensor([3.0, 4.0])    # RMS sqrt(25/16) = 5/4 → × 4/5
        table.rows[1] = 2.0                              # RMS 2 → × 1/2
        table.rows[2:] = 0.5
    table.renormalise_()
    expected_first = torch.zeros(D)
    expected_first[:2] = torch.tensor([2.4, 3.2])
    torch.testing.assert_close(table.rows[0], expected_first)
    torch.testing.assert_close(table.rows[1], torch.ones(D))
    torch.testing.assert_close(table.rows[2:], torch.ones(V - 2, D))
    torch.testing.assert_close(renormalise_rows(torch.tensor([[3.0, 4.0]]), rms=5 / math.sqrt(2)),
                               torch.tensor([[3.0, 4.0]]))


def test_embed_and_decode_logits_both_use_the_tied_table():
    model = tiny_model()
    table = TiedTable(model, mean=0.1, std=0.5)
    table.init_(seed=0)
    h = torch.randn(2, L, TINY["width"], generator=torch.Generator().manual_seed(1))
    ids = torch.tensor([[7, 3, 7]])
    logits_before, x_before = model.decode(h).detach(), table.embed(ids).detach()
    torch.testing.assert_close(x_before[0, 1], (table.rows[3] - 0.1) / 0.5)
    delta = torch.randn(D, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        table.rows[7] += delta
    logits_after, x_after = model.decode(h).detach(), table.embed(ids).detach()
    hidden = F.gelu(h @ model.proj_kernel + model.proj_bias, approximate="tanh")
    with torch.no_grad():
        torch.testing.assert_close(logits_after[..., 7] - logits_before[..., 7], hidden @ delta)
    others = torch.arange(V) != 7
    assert torch.equal(logits_after[..., others], logits_before[..., others])
    torch.testing.assert_close(x_after[0, 0] - x_before[0, 0], delta / 0.5)
    assert torch.equal(x_after[0, 1], x_before[0, 1])


# ---- gradients ------------------------------------------------------------------------------------

def test_denoise_gradient_flows_through_the_target_as_an_undetached_loss():
    """decode_prob 0, no self-conditioning: the loss is mean (x̂ − x)²/max(1−t, t_eps)² with x the
    table's rows; its gradient, computed here with nothing detached, is the learned step's."""
    model = tiny_model()
    table = TiedTable(model)
    table.init_(seed=1)
    run = with_objective(tiny_run(1), decode_prob=0.0, self_cond_prob=0.0)
    data = token_data()
    draws = draw_step((B, L, D), run.objective, torch.Generator().manual_seed(2))
    grad, loss = table_gradient(learned_step(table, run, False), model, data, draws)

    model.zero_grad(set_to_none=True)
    x0 = table.embed(data["input_ids"])
    t = draws.t[:, None, None]
    z_t = t * x0 + (1 - t) * 2.0 * draws.eps
    x_hat, _ = model(torch.cat([z_t, torch.zeros_like(z_t)], -1), draws.t, draws.w, draws.decode_row)
    reference = ((x_hat - x0) / (1 - t).clamp_min(0.05)).pow(2).mean()
    reference.backward()
    torch.testing.assert_close(loss, reference.detach())
    torch.testing.assert_close(grad, model.unembed_kernel.grad.t())

    detached, _ = table_gradient(learned_step(table, run, False, through_target=False), model, data, draws)
    assert not torch.allclose(detached, grad, atol=1e-6)      # the target term is not negligible
    used = torch.zeros(V, dtype=torch.bool)
    used[data["input_ids"].unique()] = True
    assert (grad[used].abs().sum(1) > 0).all()               # rows of the batch's tokens learn
    assert torch.equal(grad[~used], torch.zeros_like(grad[~used]))  # no decode: no other row does


def test_decode_cross_entropy_trains_the_table_as_embedding_and_unembedding():
    model = tiny_model()
    table = TiedTable(model)
    table.init_(seed=1)
    run = with_objective(tiny_run(1), decode_prob=1.0)
    data = token_data()
    draws = draw_step((B, L, D), run.objective, torch.Generator().manual_seed(3))
    grad, loss = table_gradient(learned_step(table, run, False), model, data, draws)

    model.zero_grad(set_to_none=True)
    x0 = table.embed(data["input_ids"])
    lam = draws.lam[..., None]
    z_dec = lam * x0 + (1 - lam) * run.objective.decode_noise_scale * draws.eps_decode
    ones = torch.ones(B)
    _, h = model(torch.cat([z_dec, torch.zeros_like(z_dec)], -1), ones, draws.w, ones)
    reference = F.cross_entropy(model.decode(h).transpose(1, 2), data["input_ids"])
    reference.backward()
    torch.testing.assert_close(loss, reference.detach())
    torch.testing.assert_close(grad, model.unembed_kernel.grad.t())
    assert (grad.abs().sum(1) > 0).all()     # the softmax reaches every row, in the batch or not


# ---- training -------------------------------------------------------------------------------------

def train_learned(out, steps: int, data: dict, lr: float = 1e-3, **objective):
    model = tiny_model()
    table = TiedTable(model)
    table.init_(seed=0)
    initial = table.rows.detach().clone()
    run = with_objective(tiny_run(steps, lr=lr), **objective)
    train(model, run, TensorBatches(data, run.budget.batch_size), out, {"model": dataclasses.asdict(
        model.cfg)}, loss_covers_padding=False, seq_shape=(L, D), progress=False,
        step_fn=learned_step(table, run, False), after_step=table.renormalise_)
    return model, table, initial


def test_steps_renormalise_the_table_and_the_checkpoint_restores_it(tmp_path):
    model, table, initial = train_learned(tmp_path, 3, token_data(8))
    assert not torch.allclose(table.rows, initial)                        # it was trained ...
    torch.testing.assert_close(table.rows.norm(dim=1), torch.full((V,), math.sqrt(D)))  # ... and renormalised
    raw, _ = load_model(tmp_path, "model")
    assert torch.equal(TiedTable(raw).rows, table.rows.detach())
    ema, _ = load_model(tmp_path, "ema")
    assert ema.unembed_kernel.shape == (D, V) and not torch.equal(ema.unembed_kernel, raw.unembed_kernel)


def test_tiny_model_with_a_learned_table_overfits_a_few_sequences(tmp_path):
    data = token_data(2)
    model, table, _ = train_learned(tmp_path, 150, data, lr=1e-2, decode_noise_scale=1.0)
    model.eval()
    with torch.no_grad():  # decode the table's own clean embeddings at t = 1, mode on
        x = table.embed(data["input_ids"])
        ones = torch.ones(2)
        _, h = model(torch.cat([x, torch.zeros_like(x)], -1), ones, ones, ones)
        accuracy = (model.decode(h).argmax(-1) == data["input_ids"]).float().mean().item()
    assert accuracy >= 0.95
    log = [json.loads(line) for line in open(tmp_path / "train_log.jsonl")]
    assert log[-1]["l2_loss"] < log[0]["l2_loss"] / 2


# ---- the stage ------------------------------------------------------------------------------------

def stage_assets(root):
    import datasets
    from transformers import T5Config

    split = datasets.Dataset.from_dict({k: v.numpy() for k, v in token_data(8, seed=4).items()})
    datasets.DatasetDict(train=split).save_to_disk(str(root / "tokens"))
    build_tokenizer(root / "tok")
    T5Config(vocab_size=V, d_model=D, num_layers=1, num_heads=2, d_kv=8, d_ff=32).save_pretrained(
        root / "encoder")  # the learned table takes the encoder's width


def test_elf_train_and_sample_with_a_learned_table(tmp_path):
    stage_assets(tmp_path)
    embedding = EmbeddingSettings(kind="learned", normalization="fixed", mean=0.0, std=1.0, cache=False)
    run = tiny_run(4, batch_size=4)
    dataset = DatasetSettings(task="unconditional", source="embedded", name="toy", max_length=L)
    sizes = {"tiny": {k: TINY[k] for k in ("depth", "width", "heads")}}
    run_blob = {**to_dict(run), "model": {**to_dict(run.model), "size": "tiny", "bottleneck": 8}}
    settings = json.dumps({"run": run_blob, "dataset": to_dict(dataset), "embedding": to_dict(embedding),
                           "sizes": sizes})
    common = ["--tokenizer", str(tmp_path / "tok"), "--no-progress"]
    assert main(["train", "--settings", settings, "--tokens", str(tmp_path / "tokens"), "--encoder",
                 str(tmp_path / "encoder"), "--out", str(tmp_path / "run"), *common]) == 0
    model, meta = load_model(tmp_path / "run", "model")
    assert meta["learned_table"]["tied_to"] == "unembed_kernel" and meta["tokens_fingerprint"]
    assert (model.cfg.d, model.cfg.vocab_size) == (D, V)
    torch.testing.assert_close(TiedTable(model).rows.norm(dim=1), torch.full((V,), ROW_RMS * math.sqrt(D)))
    sampler = json.dumps(dict(method="ode", steps=2, sc_cfg=1.0))
    assert main(["sample", "--checkpoint", str(tmp_path / "run"), "--sampler", sampler, "--seed", "0",
                 "--n", "2", "--batch-size", "2", "--out", str(tmp_path / "s.jsonl"), *common]) == 0
    assert len((tmp_path / "s.jsonl").read_text().splitlines()) == 3    # provenance + 2 samples

    no_head = {**run_blob, "model": {**run_blob["model"], "decode_head": False}}
    bad = json.loads(settings)
    bad["run"] = no_head
    assert main(["train", "--settings", json.dumps(bad), "--tokens", str(tmp_path / "tokens"),
                 "--encoder", str(tmp_path / "encoder"), "--out", str(tmp_path / "bad"), *common]) == 2
