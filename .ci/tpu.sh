#!/usr/bin/env bash
# CI for the TPU path (issue 18): the TPU environment's torch/torch-xla pair (environment-tpu.yml) in a
# venv of its own, then the focused XLA tests on torch_xla's CPU device (PJRT_DEVICE=CPU; no TPU here).
# Measured here: the venv from a clean pip cache, from PyPI (the CPU index was unreachable), 12.4 min;
# the XLA tests (30, two of them on two XLA CPU devices) 5 min 38 s on 2 otherwise idle cores
# (`/usr/bin/time -v .ci/tpu.sh` with the venv built: 338 s wall, 522 s user).
# torch 2.9.0 comes from PyTorch's CPU wheel index when it is reachable (+cpu, ~200 MB), else from PyPI
# (the CUDA build, ~3 GB of nvidia-* wheels that are never loaded). The pip list is environment-tpu.yml's,
# with torch-xla without its [tpu] extra (libtpu is of no use on the CPU device).
# `.ci/tpu.sh --install-only` builds the venv and stops. Fails if a test fails or if no test ran (e.g. torch_xla missing: the XLA tests would all skip).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${ELF_TPU_VENV:-/tmp/elf-ci-tpu-venv}
start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  pins=$(python3 -c 'import yaml; env = yaml.safe_load(open("environment-tpu.yml"))
deps = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
print(" ".join(p.replace("[tpu]", "") for p in deps if not p.startswith("torch==")))')
  torch_pin=$(python3 -c 'import yaml; env = yaml.safe_load(open("environment-tpu.yml"))
deps = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
print(next(p for p in deps if p.startswith("torch==")))')
  cpu_index=https://download.pytorch.org/whl/cpu
  if curl -sf --max-time 20 -o /dev/null "$cpu_index/torch/"; then
    echo "CI (tpu): $torch_pin from $cpu_index"
    "$venv/bin/pip" install -q --index-url "$cpu_index" "$torch_pin+cpu"
  else
    echo "CI (tpu): $cpu_index unreachable; $torch_pin from PyPI (CUDA build)"
    "$venv/bin/pip" install -q "$torch_pin"
  fi
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q "$torch_pin" $pins
  "$venv/bin/pip" install -q --no-deps -e .   # pyproject.toml pins torch 2.13: keep the pair
fi
echo "CI (tpu): environment ready after $(( $(date +%s) - start )) s"
if [ "${1:-}" = "--install-only" ]; then exit 0; fi
"$venv/bin/python" -c 'import torch, torch_xla; print("CI (tpu): torch", torch.__version__, "torch_xla", torch_xla.__version__)'
set +e
PATH="$venv/bin:$PATH" PJRT_DEVICE=CPU "$venv/bin/python" -m pytest -q -p no:cacheprovider -rs \
  tests/test_device.py tests/test_tpu_profile.py tests/test_xla_train.py tests/test_xla_sample.py \
  tests/test_xla_dag.py 2>&1 | tee /tmp/elf-ci-tpu-pytest.log
status=${PIPESTATUS[0]}
set -e
echo "CI (tpu): done after $(( $(date +%s) - start )) s"
if [ "$status" -eq 5 ]; then echo "CI (tpu): pytest collected no tests" >&2; exit 1; fi
if [ "$status" -ne 0 ]; then exit "$status"; fi
if ! grep -qE '[0-9]+ passed' /tmp/elf-ci-tpu-pytest.log || grep -q 'SKIPPED .*tests/test_xla_' /tmp/elf-ci-tpu-pytest.log; then
  echo "CI (tpu): no test passed, or XLA tests were skipped (torch_xla not usable?)" >&2; exit 1
fi
