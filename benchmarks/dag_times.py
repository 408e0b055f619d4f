"""Benchmark: where a whole DAG run spent its time, from Snakemake's logs, side by side for several runs.

Reads each run's Snakemake log (the stderr of ``snakemake --cores all``, or the copy Snakemake keeps
under ``.snakemake/log/``): a job starts at the timestamp above its ``rule X:`` block and ends at the
one above ``Finished jobid: N``. Prints, per rule (and per run for ``train``), the seconds each job
took in each log, with the whole DAG's wall time (first start to last finish) and the sum over jobs.
With one thread per job (the rules' ``OMP_NUM_THREADS=1``), a job's wall time is about its CPU time
on an otherwise idle machine, so the sum over jobs over the wall time says how full the cores were.
Timestamps have one-second resolution: short jobs read as 0-3 s.

    python benchmarks/dag_times.py /tmp/dag1.err /tmp/dag2.err --names before after
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
RULE = re.compile(r"^(?:local)?rule (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
WILDCARDS = re.compile(r"^\s+wildcards: (.*)$")
FINISHED = re.compile(r"^Finished jobid: (\d+)")
# The wildcard that names a job's row beside its rule (other rules are summed over their jobs).
ROW_BY = {"train": "run", "distill": "run", "evaluate": "run"}


def job_times(text: str) -> dict[str, float]:
    """Seconds per job, keyed ``rule`` or ``rule:wildcard`` (``ROW_BY``); repeated keys are summed."""
    stamp = rule = jobid = None
    started: dict[str, tuple[datetime, str]] = {}
    times: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        if m := STAMP.match(line):
            stamp = datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y")
        elif m := RULE.match(line):
            rule, key, jobid = m.group(1), m.group(1), None
        elif jobid in started and (m := WILDCARDS.match(line)) and rule in ROW_BY:
            values = dict(part.split("=", 1) for part in m.group(1).split(", ") if "=" in part)
            if ROW_BY[rule] in values:
                key = f"{rule}:{values[ROW_BY[rule]]}"
                started[jobid] = (started[jobid][0], key)
        elif rule and (m := JOBID.match(line)):
            jobid = m.group(1)
            started[jobid] = (stamp, key)
        elif m := FINISHED.match(line):
            begin, name = started.pop(m.group(1), (None, None))
            if begin is not None:
                times[name] += (stamp - begin).total_seconds()
            rule = None
    return dict(times)


def wall_seconds(text: str) -> float:
    stamps = [datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y")
              for m in map(STAMP.match, text.splitlines()) if m]
    return (max(stamps) - min(stamps)).total_seconds() if stamps else float("nan")


def table(logs: list[Path], names: list[str]) -> str:
    texts = [log.read_text(errors="replace") for log in logs]
    per_log = [job_times(t) for t in texts]
    keys = sorted({k for times in per_log for k in times}, key=lambda k: (-max(t.get(k, 0) for t in per_log), k))
    head = "| job | " + " | ".join(f"{n} (s)" for n in names) + " |"
    out = [head, "|---|" + "---|" * len(names)]
    for key in keys:
        out.append(f"| {key} | " + " | ".join(f"{t.get(key, 0):.0f}" for t in per_log) + " |")
    out.append("| **sum over jobs** | " + " | ".join(f"{sum(t.values()):.0f}" for t in per_log) + " |")
    out.append("| **DAG wall** | " + " | ".join(f"{wall_seconds(t):.0f}" for t in texts) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("logs", nargs="+", type=Path, help="Snakemake logs, one per DAG run")
    p.add_argument("--names", nargs="+", help="a column name per log (default: the file names)")
    args = p.parse_args(argv)
    names = args.names or [log.name for log in args.logs]
    if len(names) != len(args.logs):
        p.error(f"{len(args.logs)} logs but {len(names)} --names")
    missing = [str(log) for log in args.logs if not log.is_file()]
    if missing:
        p.error(f"no such log: {', '.join(missing)}")
    print(table(args.logs, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
