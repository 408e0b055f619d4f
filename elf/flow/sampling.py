"""Sampling a checkpoint in batches, beside the samplers (``elf.flow.samplers``): batch k of a seed
draws its noise from a generator seeded by (seed, k), so the same seed gives the same samples and a
run can resume at any batch; each batch is rolled out, decoded, cut at its first EOS and turned into
the rows of a samples file. Also the decoded trajectory of one rollout (paper F18).

No I/O: ``elf/stages/sample.py`` loads the checkpoint and writes the files, ``elf/stages/trajectory.py``
the trajectory.

    job = SamplingJob(model, settings, tokenizer, device, "fp32", "x", (L, d), n=64)
    for rows in sample_rows(job, seed=0, batch_size=16, start_batch=done):
        ...  # one list of row dicts per batch
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import torch

from elf.config import SamplerSettings
from elf.flow.samplers import Source, decode_final, decode_logits, postprocess, rollout, time_grid
from elf.precision import network_autocast


def batch_generator(seed: int, batch: int) -> torch.Generator:
    """The generator of batch ``batch`` of evaluation seed ``seed``."""
    return torch.Generator().manual_seed(seed * 1_000_003 + batch)


def rollout_precision(asked: str | None, settings: SamplerSettings, trained: dict) -> str:
    """The precision a rollout runs in: fp32 if the sampler setting says so, else ``asked`` (the
    experiment's policy), else the policy the checkpoint was trained under (its config.json)."""
    if settings.precision == "fp32":
        return "fp32"
    return asked or trained.get("precision", "fp32")


@dataclass
class SamplingJob:
    """What every batch of one (checkpoint, sampler) shares.

    ``source_rows`` (conditional runs): ``x`` (clean source embeddings, normalised as in training),
    ``cond_seq_mask``, ``source_length``, ``source_text`` and ``reference``, one row per example;
    ``target_tokens``: the target positions the layout leaves (``DatasetSettings.target_tokens``).
    """
    model: Any
    settings: SamplerSettings
    tokenizer: Any
    device: torch.device
    precision: str
    prediction: str
    seq_shape: tuple[int, int]            # (L, d)
    n: int
    source_rows: dict | None = None
    target_tokens: int | None = None
    decoder: Any = None                   # a separate decoder (Fig. 5b), else the shared head


def batch_bounds(n: int, batch_size: int) -> list[tuple[int, int]]:
    """(first, last + 1) row of each batch of ``n`` rows."""
    return [(lo, min(lo + batch_size, n)) for lo in range(0, n, batch_size)]


def sample_rows(job: SamplingJob, seed: int, batch_size: int, start_batch: int = 0
                ) -> Iterator[list[dict]]:
    """The rows of batches ``start_batch``, ... of one seed, a batch at a time."""
    for k, (lo, hi) in enumerate(batch_bounds(job.n, batch_size)):
        if k >= start_batch:
            yield sample_batch(job, lo, hi, batch_generator(seed, k))


def sample_batch(job: SamplingJob, lo: int, hi: int, generator: torch.Generator) -> list[dict]:
    """Rows ``lo`` to ``hi - 1``: noise, rollout, decode, post-process, detokenise."""
    s, (L, d), rows_in = job.settings, job.seq_shape, job.source_rows
    z_init = (s.noise_scale * torch.randn(hi - lo, L, d, generator=generator)).to(job.device)
    source = None
    if rows_in is not None:
        source = Source(rows_in["cond_seq_mask"][lo:hi].to(job.device), rows_in["x"][lo:hi].to(job.device))
    with torch.no_grad(), network_autocast(job.device, job.precision):
        z, _ = rollout(job.model, s, z_init, generator, source=source, prediction=job.prediction)
        ids = decode_final(job.model, z, s.sc_cfg, job.decoder).argmax(-1).cpu()
    eos, pad = job.tokenizer.eos_token_id, job.tokenizer.pad_token_id
    if rows_in is None:
        tokens = postprocess(ids, eos, pad)
    else:
        tokens = postprocess(ids, eos, pad, source_length=rows_in["source_length"][lo:hi],
                             target_length=job.target_tokens)
    rows = []
    for i, seq in enumerate(tokens.tolist()):
        kept = [t for t in (seq[:seq.index(eos)] if eos in seq else seq) if t != pad]
        row = dict(i=lo + i, text=job.tokenizer.decode(kept, skip_special_tokens=True), token_ids=kept)
        if rows_in is not None:
            row.update(source=rows_in["source_text"][lo + i], reference=rows_in["reference"][lo + i])
        rows.append(row)
    return rows


# --------------------------------------------------------------------------------------------------
# The decoded trajectory of one rollout (F18)
# --------------------------------------------------------------------------------------------------

def closest_steps(step_times: list[float], at: list[float]) -> list[int]:
    """Sorted unique indices of ``step_times`` closest to each value of ``at`` (first on ties)."""
    return sorted({min(range(len(step_times)), key=lambda i: abs(step_times[i] - a)) for a in at})


def record_trajectory(model, s: SamplerSettings, z_init, generator, at: list[float],
                      prediction: str = "x"):
    """Roll out from ``z_init``; return the grid and ``[(t, step, state, ids)]`` for the steps
    closest to ``at`` (step N, state "final": the decoded end state; else "x_hat", the network's
    clean estimate x̂_k from the state at t_k)."""
    grid = time_grid(s, generator)
    n_steps = len(grid) - 1
    step_times = [float(t) for t in grid[:-1]] + [1.0]
    wanted = set(closest_steps(step_times, at))
    records = []

    def record(k, t_next, z, x_hat):
        if k in wanted:
            ids = decode_logits(model, x_hat, s.sc_cfg).argmax(-1).cpu()
            records.append((step_times[k], k, "x_hat", ids))

    with torch.no_grad():
        z, _ = rollout(model, s, z_init, generator, grid=grid, prediction=prediction, record=record)
        if n_steps in wanted:
            ids = decode_logits(model, z, s.sc_cfg).argmax(-1).cpu()
            records.append((1.0, n_steps, "final", ids))
    return grid, records


def decoded_steps(records, tokenizer) -> list[dict]:
    """``record_trajectory``'s records as the trajectory file's steps: token ids cut at the first EOS
    (padding dropped) and their texts."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    steps = []
    for t, k, state, ids in records:
        kept = [[tok for tok in row if tok != pad] for row in postprocess(ids, eos, pad).tolist()]
        steps.append(dict(t=t, step=k, state=state, token_ids=kept,
                          texts=[tokenizer.decode(row, skip_special_tokens=True) for row in kept]))
    return steps
