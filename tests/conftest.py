"""Test-wide settings: one intra-op thread, so tiny models do not thrash the 2 cores (and tests that
run beside other work stay fast); deterministic torch algorithms."""

import torch

torch.set_num_threads(1)
