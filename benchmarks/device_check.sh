#!/usr/bin/env bash
# One-shot device check (issue 20): one table of what ELF costs on this machine's GPU, < 8 minutes.
# What each row means: the docstring of benchmarks/device_check.py. Without CUDA (or with --tiny)
# it runs at tiny shapes in seconds. Arguments go to device_check.py (--help lists them).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
exec python "$root/benchmarks/device_check.py" "$@"
