"""The device layer (elf/device.py) and the static-shape steps XLA runs, checked on the CPU: the same
loss and gradients as the row-selecting steps the CPU and CUDA take. The XLA device itself is tested
in tests/test_xla_*.py (the TPU venv, .ci/tpu.sh)."""

import importlib.util
from pathlib import Path

import pytest
import torch

from elf.cli import ElfError, main
from elf.stages.args import resolve_device
from elf.config import DistillSettings
from elf.device import DeviceError, data_parallel_device, requested, resolve, to_cpu
from elf.flow.distill import distill_step, draw_distill_step
from elf.flow.objective import ObjectiveSettings, training_step
from tests.artifact_world import distill_args, train_args
from tests.helpers import tiny_model
from tests.test_fast_paths import gen, step_inputs

HAS_XLA = importlib.util.find_spec("torch_xla") is not None
ROOT = Path(__file__).resolve().parents[1]


def test_auto_is_elf_device_when_set(monkeypatch):
    monkeypatch.delenv("ELF_DEVICE", raising=False)
    assert requested("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setenv("ELF_DEVICE", "xla")
    assert requested("auto") == "xla"
    assert requested("cpu") == "cpu"  # an explicit device wins
    assert resolve("cpu") == torch.device("cpu")


@pytest.mark.skipif(HAS_XLA, reason="torch_xla is installed here")
def test_xla_without_torch_xla_is_one_clear_error(monkeypatch):
    with pytest.raises(DeviceError, match="needs torch_xla.*environment-tpu.yml.*PJRT_DEVICE"):
        resolve("xla")
    monkeypatch.setenv("ELF_DEVICE", "xla")
    with pytest.raises(ElfError, match="--device auto: device xla needs torch_xla"):
        resolve_device("auto")


@pytest.mark.skipif(HAS_XLA, reason="torch_xla is installed here")
@pytest.mark.parametrize("stage_args", [train_args, distill_args], ids=["train", "distill"])
def test_a_training_stage_on_xla_without_torch_xla_fails_before_reading_anything(tmp_path, capsys,
                                                                                  stage_args):
    args = stage_args(tmp_path)  # no store, tokenizer or teacher there: the device is checked first
    assert main([*args, "--device", "xla"]) == 2
    assert f"elf {args[0]}: error: --device xla: device xla needs torch_xla" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_xla_training_under_torchrun_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")  # each torchrun process would train over all devices and write
    with pytest.raises(DeviceError, match="without torchrun"):
        data_parallel_device()


def test_an_unknown_device_is_an_elf_error():
    with pytest.raises(ElfError, match="unknown device 'tpu'"):
        resolve_device("tpu")


def test_to_cpu_keeps_the_structure_and_cpu_tensors():
    t = torch.ones(2)
    state = {"a": t, "b": [t, (t, 3)], "c": "x", "d": {"e": 1.5}}
    moved = to_cpu(state)
    assert moved["a"] is t and moved["b"][1][0] is t and moved["b"][1][1] == 3
    assert moved["c"] == "x" and moved["d"] == {"e": 1.5} and isinstance(moved["b"][1], tuple)


def _grads(model):
    return {n: p.grad for n, p in model.named_parameters()}


def _assert_same_step(static, selecting, g_static, g_selecting):
    torch.testing.assert_close(static.loss, selecting.loss, rtol=1e-6, atol=0)
    torch.testing.assert_close(static.sums, selecting.sums, rtol=1e-6, atol=1e-7)
    for name, grad in g_selecting.items():
        # a parameter idle on the row-selecting path (None) gets an exact zero on the static one
        expected = torch.zeros_like(g_static[name]) if grad is None else grad
        torch.testing.assert_close(g_static[name], expected, rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize("conditional", [False, True])
@pytest.mark.parametrize("decode_prob", [0.3, 0.0])
def test_static_training_step_gives_the_same_loss_and_gradients(conditional, decode_prob):
    batch, draws, s = step_inputs(conditional=conditional)
    s = ObjectiveSettings(**{**vars(s), "decode_prob": decode_prob})
    if decode_prob == 0:
        draws.decode_row = torch.zeros_like(draws.decode_row)
    results = []
    for static in (True, False):
        model = tiny_model(seed=1, decode_head=decode_prob > 0)
        with torch.no_grad():
            model.final_layer.linear.weight.normal_(0, 0.1, generator=gen(7))
        out = training_step(model, batch, draws, s, first_pass_all_rows=False, static_shapes=static)
        out.loss.backward()
        results.append((out, _grads(model)))
    (static, g_static), (selecting, g_selecting) = results
    _assert_same_step(static, selecting, g_static, g_selecting)
    assert torch.equal(static.parts["ce_per_token"], selecting.parts["ce_per_token"])


@pytest.mark.parametrize("conditional", [False, True])
def test_static_distill_step_gives_the_same_loss_and_gradients(conditional):
    batch, _, s = step_inputs(conditional=conditional)
    draws = draw_distill_step((8, 12, 16), s, DistillSettings(student_steps=4, teacher_substeps=3),
                              gen(5))
    draws.decode_row = torch.tensor([1., 0, 0, 0, 1, 0, 0, 0])
    teacher = tiny_model(seed=2).eval()
    with torch.no_grad():
        teacher.final_layer.linear.weight.normal_(0, 0.1, generator=gen(8))
    results = []
    for static in (True, False):
        student = tiny_model(seed=1)
        out = distill_step(student, teacher, batch, draws, s, static_shapes=static)
        out.loss.backward()
        results.append((out, _grads(student)))
    (static, g_static), (selecting, g_selecting) = results
    _assert_same_step(static, selecting, g_static, g_selecting)
    for key in ("sc_half", "target"):
        torch.testing.assert_close(static.parts[key], selecting.parts[key], rtol=1e-6, atol=1e-7)


def _pip_pins(name):
    import yaml

    env = yaml.safe_load((ROOT / name).read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    return dict(line.replace("[tpu]", "").split("==") for line in pip if "==" in line)


def test_the_tpu_environment_pins_the_torch_xla_pair_and_otherwise_the_main_pins():
    tpu, main = _pip_pins("environment-tpu.yml"), _pip_pins("environment.yml")
    assert tpu.pop("torch") == tpu.pop("torch-xla") == "2.9.0"
    main.pop("torch")
    assert tpu == main


def test_ci_runs_the_xla_tests_after_the_main_suite():
    run = (ROOT / ".ci" / "run").read_text().splitlines()
    assert run[-1] == ".ci/tpu.sh" and (ROOT / ".ci" / "tpu.sh").stat().st_mode & 0o111
    script = (ROOT / ".ci" / "tpu.sh").read_text()
    assert "PJRT_DEVICE=CPU" in script and "tests/test_xla_train.py" in script
