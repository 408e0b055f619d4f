"""CI (.ci/slurm.sh): did a training run killed mid-way resume from its checkpoint, and end equal to an
uninterrupted run?

    python3 .ci/resume_check.py KILLED_RUN_DIR REFERENCE_RUN_DIR STATE_AT_KILL LOG_AT_KILL

STATE_AT_KILL / LOG_AT_KILL are copies of KILLED_RUN_DIR/resume/state.pt and train_log.jsonl taken
once the killed job was gone. Checks, exiting 1 with a message on the first that fails:
- the kill came between the first checkpoint and the last step;
- the finished run kept the killed attempt's log lines up to the checkpoint (a resumed run truncates
  its log to the checkpoint's step; a run restarted from step 0 rewrites every line, and the lines'
  tokens_per_s timings differ);
- resume/ is gone (cleared after the final checkpoint);
- every tensor of model.safetensors and ema.safetensors equals the uninterrupted run's, bitwise.
"""

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file


def log_lines_up_to(path: Path, step: int) -> list[str]:
    return [line for line in path.read_text().splitlines()
            if line.strip() and json.loads(line)["step"] <= step]


def differing_tensors(a: Path, b: Path) -> list[str]:
    left, right = load_file(a), load_file(b)
    if left.keys() != right.keys():
        return sorted(left.keys() ^ right.keys())
    return [name for name in left if not torch.equal(left[name], right[name])]


def main(killed: str, reference: str, state_at_kill: str, log_at_kill: str) -> int:
    killed, reference = Path(killed), Path(reference)
    step = int(torch.load(state_at_kill, weights_only=True)["step"])
    total = json.loads(log_lines_up_to(killed / "train_log.jsonl", 10**12)[-1])["step"]
    if not 0 < step < total:
        print(f"killed at checkpoint step {step}, not between 0 and {total}", file=sys.stderr)
        return 1
    kept = log_lines_up_to(killed / "train_log.jsonl", step)
    if kept != log_lines_up_to(Path(log_at_kill), step):
        print(f"log lines up to step {step} were rewritten: the run restarted instead of resuming",
              file=sys.stderr)
        return 1
    if (killed / "resume").exists():
        print(f"{killed}/resume still exists after the run finished", file=sys.stderr)
        return 1
    for name in ("model.safetensors", "ema.safetensors"):
        bad = differing_tensors(killed / name, reference / name)
        if bad:
            print(f"{name}: {len(bad)} tensors differ from the uninterrupted run, e.g. {bad[:3]}",
                  file=sys.stderr)
            return 1
    print(f"resumed from step {step} of {total}; model and EMA weights equal the uninterrupted run's")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
