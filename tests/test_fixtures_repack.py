"""The repacked fixtures in tests/fixtures (tests/fixtures/repack.py) hold exactly the authors' files:
checked against the originals in ../shared/fixtures (or $ELF_FIXTURES) when they are present."""

import os
from pathlib import Path

import pytest
import torch

from tests.fixtures.repack import NAMES, load_packed
from tests.fixtures_util import SHARED_ORIGINALS

ORIGINALS = Path(os.environ.get("ELF_FIXTURES") or SHARED_ORIGINALS)


def assert_identical(ours, theirs, where="fixture"):
    """Same structure, same non-tensor values, tensors equal bit for bit with the same dtype."""
    assert type(ours) is type(theirs), where
    if isinstance(theirs, torch.Tensor):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, where
        assert torch.equal(ours.view(torch.uint8) if ours.numel() else ours,
                           theirs.view(torch.uint8) if theirs.numel() else theirs), where
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs), where
        for key in theirs:
            assert_identical(ours[key], theirs[key], f"{where}/{key}")
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_identical(a, b, f"{where}[{i}]")
    else:
        assert ours == theirs, where


@pytest.mark.parametrize("name", NAMES)
def test_repacked_fixture_equals_the_original(name):
    if not (ORIGINALS / name).exists():
        pytest.skip(f"original fixture {ORIGINALS / name} not present (repacked copy in use)")
    assert_identical(load_packed(name), torch.load(ORIGINALS / name, weights_only=True), name)


def test_shared_tensors_are_stored_once_and_loaded_as_copies():
    one, two = load_packed("train_step_uncond.pt"), load_packed("sampler_ode.pt")
    weights = "blocks.0.mlp.w12.weight"
    assert torch.equal(one["state_dict"][weights], two["state_dict"][weights])
    one["state_dict"][weights].zero_()  # a test mutating its copy leaves the next load intact
    assert torch.equal(load_packed("train_step_uncond.pt")["state_dict"][weights],
                       two["state_dict"][weights])
    folder = Path(__file__).parent / "fixtures"
    packed = sum(f.stat().st_size for f in folder.glob("*.xz"))
    assert packed < 15e6  # 25 MB of originals
