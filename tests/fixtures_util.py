"""Loading the authors' parity fixtures: the repacked copy in ``tests/fixtures`` (``repack.py``), or
the original ``.pt`` files of the folder ``$ELF_FIXTURES`` when that is set."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from elf.model import ELF, model_config
from tests.fixtures.repack import load_packed

SHARED_ORIGINALS = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def load_fixture(name: str) -> dict:
    folder = os.environ.get("ELF_FIXTURES")
    if folder:
        return torch.load(Path(folder) / name, weights_only=True)
    return load_packed(name)


def fixture_model(fx: dict) -> ELF:
    """The fixture's tiny network with its weights, loaded by the released-checkpoint names."""
    c = fx["config"]["model"]
    model = ELF(model_config("ELF-B", depth=c["depth"], width=c["width"], heads=c["heads"], d=c["d"],
                             bottleneck=c["bottleneck"], vocab_size=c["vocab"],
                             max_length=c["max_length"]))
    model.load_state_dict(fx["state_dict"], strict=True)
    assert model.num_parameters() == c["num_parameters"]
    return model
