"""The arithmetic and the memory probe of benchmarks/scaling.py (the benchmark itself is run by hand)."""

from __future__ import annotations

import os
import sys

import pytest

from benchmarks import scaling


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_the_time_exponent_ignores_a_fixed_start_up_cost(k):
    walls = [7.0 + 3.0 * s ** k for s in (1, 4, 16)]  # wall = a + b * size^k
    assert scaling.increment_exponent([1, 4, 16], walls) == pytest.approx(k)


def test_a_cost_that_does_not_grow_has_no_exponent():
    assert scaling.increment_exponent([1, 4, 16], [5.0, 5.0, 5.2]) is None
    assert scaling.increment_exponent([1, 2, 3], [1.0, 2.0, 3.0]) is None  # not geometric sizes


def test_slope():
    assert scaling.slope([1, 4, 16], [3.0, 12.0, 48.0]) == pytest.approx(1.0)
    assert scaling.slope([1, 4, 16], [100.0, 100.0, 100.0]) == pytest.approx(0.0)


def test_report_extrapolates_at_the_largest_sizes_rate():
    rows = [dict(stage="prepare", scale=s, units=1e6 * s, wall_s=10.0 + s, anon_mb=300.0, rss_mb=320.0)
            for s in (1, 4, 16)]
    table = scaling.report(rows, corruption_s=0.1)
    hours = 9.04e9 / (16e6 / 26.0) / 3600  # OWT tokens at 16e6 tokens in 26 s
    assert "| prepare | 1.00 | +0.00 | +1.00 |" in table
    assert f"| {hours:,.1f} | {hours / 8:,.2f} (8 cores) | cpu |" in table


def test_memory_probe_counts_an_address_space_once():
    block = bytearray(64 << 20)
    block[::4096] = b"x" * len(block[::4096])  # touch every page
    once, _ = scaling._memory_kb([os.getpid()])
    twice, total = scaling._memory_kb([os.getpid(), os.getpid()])  # the same address space twice
    assert once > 64 << 10 and abs(twice - once) < 4 << 10 and total >= twice
    del block


def test_measure_reports_a_childs_peak():
    result = scaling.measure([sys.executable, "-c", "b = bytearray(200 << 20); b[::4096] = b'x' * (51200)"])
    assert result["anon_mb"] > 190 and result["wall_s"] > 0
