"""Locating and loading the authors' parity fixtures (``../shared/fixtures`` beside the checkout)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from elf.model import ELF, model_config


def fixtures_dir() -> Path:
    env = os.environ.get("ELF_FIXTURES")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def load_fixture(name: str) -> dict:
    path = fixtures_dir() / name
    if not path.exists():
        pytest.skip(f"parity fixture {path} not found (it ships beside the checkout in ../shared/fixtures; "
                    "set ELF_FIXTURES to its folder to run these tests)")
    return torch.load(path, weights_only=True)


def fixture_model(fx: dict) -> ELF:
    """The fixture's tiny network with its weights, loaded by the released-checkpoint names."""
    c = fx["config"]["model"]
    model = ELF(model_config("ELF-B", depth=c["depth"], width=c["width"], heads=c["heads"], d=c["d"],
                             bottleneck=c["bottleneck"], vocab_size=c["vocab"],
                             max_length=c["max_length"]))
    model.load_state_dict(fx["state_dict"], strict=True)
    assert model.num_parameters() == c["num_parameters"]
    return model
