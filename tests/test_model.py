"""The network's named sizes and invariants (spec §3)."""

import pytest
import torch

from elf.config import ModelSettings
from elf.model import ELF, model_config, run_model_config
from elf.train.checkpoint import config_from_state_dict
from tests.helpers import tiny_model


@pytest.mark.parametrize("size, conditioning, expected_m", [
    ("ELF-B", "in_context", 104.59), ("ELF-M", "in_context", 342.55), ("ELF-L", "in_context", 652.12),
    ("ELF-B", "adaln", 148.0),
])
def test_parameter_counts_with_the_t5_vocabulary(size, conditioning, expected_m):
    with torch.device("meta"):
        model = ELF(model_config(size, d=512, vocab_size=32128, conditioning=conditioning))
    assert model.num_parameters() / 1e6 == pytest.approx(expected_m, rel=0.01)


def test_denoise_head_is_zero_initialised_and_mode_tokens_gate():
    model = tiny_model()
    x = torch.randn(2, 12, 32)
    t, w = torch.tensor([0.3, 0.7]), torch.tensor([1.0, 3.0])
    x_hat, h = model(x, t, w)
    assert x_hat.abs().max() == 0 and h.shape == (2, 12, 64)
    _, h_on = model(x, t, w, torch.ones(2))
    assert (h_on - h).abs().max() > 0          # mode tokens switched on change the text states
    _, h_off = model(x, t, w, torch.zeros(2))
    torch.testing.assert_close(h_off, h)       # gate 0 = mode off


def test_config_is_recovered_from_a_released_layout_state_dict():
    model = tiny_model()
    cfg = config_from_state_dict(model.state_dict(), max_length=12)
    assert (cfg.depth, cfg.width, cfg.heads, cfg.d, cfg.bottleneck, cfg.vocab_size) == (2, 64, 4, 16, 8, 32)


def test_control_tokens_setting_shapes_the_network_and_survives_its_state_dict():
    settings = ModelSettings(size="tiny", bottleneck=8, control_tokens=1)
    cfg = run_model_config(settings, {"tiny": dict(depth=1, width=32, heads=2)}, d=16, vocab_size=20,
                           max_length=6)
    assert (cfg.num_time_tokens, cfg.num_cfg_tokens, cfg.num_mode_tokens, cfg.num_control_tokens) == (1, 1, 1, 3)
    model = ELF(cfg)
    x_hat, h = model(torch.randn(2, 6, 32), torch.tensor([0.2, 0.8]), torch.tensor([1.0, 2.0]))
    assert x_hat.shape == (2, 6, 16) and h.shape == (2, 6, 32)   # the 3 control tokens are split off
    assert config_from_state_dict(model.state_dict(), max_length=6).num_control_tokens == 3
    default = run_model_config(ModelSettings(size="tiny"), {"tiny": dict(depth=1, width=32, heads=2)},
                               d=16, vocab_size=20, max_length=6)
    assert default.num_control_tokens == 12                    # the released code's 4 + 4 + 4
