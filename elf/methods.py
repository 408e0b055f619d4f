"""The sampler methods, one row each: the name the paper prints, whether the SDE's γ applies (spec §5)
and the order the paper's tables list them in. The report reads these rather than testing
``method == "sde"``, so a method added to ``SamplerSettings.method`` needs one row here, and a test
(tests/test_methods.py) keeps the two equal.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    label: str        # as the paper prints it
    uses_gamma: bool  # γ (the SDE's noise level) is a setting of this method
    paper_order: int  # the paper's tables list SDE rows before ODE rows


METHODS = {"sde": Method("SDE", uses_gamma=True, paper_order=0),
           "ode": Method("ODE", uses_gamma=False, paper_order=1)}


def method(name: str) -> Method:
    try:
        return METHODS[str(name)]
    except KeyError:
        raise KeyError(f"sampler method {name!r}: known are {', '.join(METHODS)} (elf/methods.py)") \
            from None


def label(name: str) -> str:
    return method(name).label


def uses_gamma(name: str) -> bool:
    return method(name).uses_gamma
