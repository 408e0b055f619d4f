"""Test-wide settings: one intra-op thread, so tiny models do not thrash the 2 cores (and tests that
run beside other work stay fast); the Hugging Face libraries offline, so a test (or a stage it runs,
DAG jobs included: they inherit the environment) that would download weights or data fails instead."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

import torch  # noqa: E402

torch.set_num_threads(1)
