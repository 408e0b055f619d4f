"""Small shared test helpers: a tiny model and an in-memory, resumable batch source."""

from __future__ import annotations

import torch

from elf.config import BudgetSettings, ObjectiveSettings, OptimSettings, RunSettings
from elf.model import ELF, model_config

TINY = dict(depth=2, width=64, heads=4, d=16, bottleneck=8, vocab_size=32, max_length=12)


def tiny_model(seed: int = 0, **overrides) -> ELF:
    torch.manual_seed(seed)
    return ELF(model_config("ELF-B", **{**TINY, **overrides}))


def tiny_data(n: int = 8, L: int = 12, d: int = 16, vocab: int = 32, seed: int = 0) -> dict:
    """Sequences whose embeddings are a fixed table lookup (so decode is learnable)."""
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(vocab, d, generator=g)
    ids = torch.randint(3, vocab, (n, L), generator=g)
    return dict(input_ids=ids, attention_mask=torch.ones(n, L, dtype=torch.long),
                cond_seq_mask=torch.zeros(n, L, dtype=torch.long), x=table[ids])


class TensorBatches:
    """Cycles through in-memory rows in one seeded order (so two batches of 4 are one batch of 8);
    yields rank slices of global batches."""

    def __init__(self, data: dict, batch_size: int, seed: int = 0, rank: int = 0, world_size: int = 1):
        self.data, self.batch_size, self.seed = data, batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.position = 0

    def __iter__(self):
        n = len(self.data["input_ids"])
        local = self.batch_size // self.world_size
        while True:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed))
            idx = order[(self.position * self.batch_size + torch.arange(self.batch_size)) % n]
            idx = idx[self.rank * local:(self.rank + 1) * local]
            self.position += 1
            yield {k: v[idx] for k, v in self.data.items()}

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]


def tiny_run(steps: int, batch_size: int = 8, lr: float = 1e-3, **budget) -> RunSettings:
    return RunSettings(dataset="toy", optim=OptimSettings(blr=lr * 256 / batch_size, ema_warmup=True),
                       objective=ObjectiveSettings(),
                       budget=BudgetSettings(batch_size=batch_size, steps=steps, log_every=1,
                                             **budget))
