"""The method table (elf/methods.py) names exactly the methods the sampler settings allow."""

import typing

import pytest

from elf import methods
from elf.config import SamplerSettings
from elf.report.cells import sampler_text


def test_the_table_has_a_row_for_every_method_the_settings_allow():
    allowed = typing.get_args(typing.get_type_hints(SamplerSettings)["method"])
    assert set(allowed) == set(methods.METHODS)


def test_an_unknown_method_is_named():
    with pytest.raises(KeyError, match="'heun'"):
        methods.label("heun")


def test_gamma_is_printed_for_the_methods_that_use_it():
    row = {"sampler": "s", "steps": 4, "gamma": 1.5, "sc_cfg": 3.0, "method": "sde"}
    assert sampler_text(row) == "s: SDE 4 steps, γ=1.5, SC-CFG 3"
    assert sampler_text({**row, "method": "ode"}) == "s: ODE 4 steps, SC-CFG 3"
