"""benchmarks/dag_times.py: job seconds read from a Snakemake log, per rule and per run, side by side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "dag_times.py"


def job(stamp: str, rule: str, jobid: int, wildcards: str = "", local: bool = True) -> str:
    lines = [f"[Thu Dec  3 {stamp} 2026]", f"{'local' if local else ''}rule {rule}:",
             "    output: results/x", f"    jobid: {jobid}", "    reason: Missing output files"]
    if wildcards:
        lines.append(f"    wildcards: {wildcards}")
    return "\n".join(lines + ["    resources: tmpdir=/tmp", "Shell command: None", ""])


def done(stamp: str, jobid: int, rule: str) -> str:
    return f"[Thu Dec  3 {stamp} 2026]\nFinished jobid: {jobid} (Rule: {rule})\n2 of 9 steps done\n"


def write_log(path: Path, train_base_end: str) -> Path:
    path.write_text("Building DAG of jobs...\n"
                    + job("09:00:00", "corpora", 1)
                    + done("09:00:02", 1, "corpora")
                    + job("09:00:02", "train", 2, "run=base", local=False)
                    + job("09:00:03", "train", 3, "run=ref")
                    + done("09:01:03", 3, "train")
                    + job("09:01:03", "table", 4, "name=T1")
                    + job("09:01:04", "table", 5, "name=T3")
                    + done("09:01:05", 4, "table") + done("09:01:07", 5, "table")
                    + done(train_base_end, 2, "train"))
    return path


def test_it_prints_each_rule_and_run_side_by_side_with_the_wall_time(tmp_path):
    before = write_log(tmp_path / "before.err", "09:10:02")      # base trains 600 s
    after = write_log(tmp_path / "after.err", "09:05:02")        # 300 s
    out = subprocess.run([sys.executable, str(SCRIPT), str(before), str(after), "--names", "a", "b"],
                         capture_output=True, text=True, check=True).stdout
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in out.splitlines()[2:]}
    assert [c.strip(" |") for c in rows["train:base"]] == ["600", "300"]
    assert [c.strip(" |") for c in rows["train:ref"]] == ["60", "60"]
    assert [c.strip(" |") for c in rows["table"]] == ["5", "5"]           # two jobs summed: 2 + 3
    assert [c.strip(" |") for c in rows["corpora"]] == ["2", "2"]
    assert [c.strip(" |") for c in rows["**sum over jobs**"]] == ["667", "367"]
    assert [c.strip(" |") for c in rows["**DAG wall**"]] == ["602", "302"]
    assert out.splitlines()[2].startswith("| train:base |")                 # longest first


def test_a_missing_log_or_a_name_per_log_short_fails_naming_it(tmp_path):
    log = write_log(tmp_path / "a.err", "09:10:02")
    missing = subprocess.run([sys.executable, str(SCRIPT), str(log), str(tmp_path / "nope.err")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "no such log" in missing.stderr and "nope.err" in missing.stderr
    short = subprocess.run([sys.executable, str(SCRIPT), str(log), str(log), "--names", "one"],
                           capture_output=True, text=True)
    assert short.returncode == 2 and "2 logs but 1 --names" in short.stderr
