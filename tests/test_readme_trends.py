"""benchmarks/readme_trends.py: the README quotes the review's trend verdicts, and a changed verdict fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "readme_trends.py"
BEGIN = "<!-- trends: generated from reports/trends.md by benchmarks/readme_trends.py -->"
END = "<!-- trends: end -->"
TABLE = """1 of 1 checks resolve.

| Claim | Metric | Verdict |
|---|---|---|
| more steps lower Gen. PPL | gen_ppl | **{verdict}** |"""


def run(tmp: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--readme", str(tmp / "README.md"),
                           "--trends", str(tmp / "trends.md"), *flags], capture_output=True, text=True)


def test_update_quotes_the_verdicts_and_a_changed_verdict_fails(tmp_path):
    (tmp_path / "README.md").write_text(f"# x\n\n{BEGIN}\nold\n{END}\n\nafter\n")
    spread = "\n\n### Training-seed spread\n\n| a | b |\n"
    (tmp_path / "trends.md").write_text(TABLE.format(verdict="holds") + spread)
    assert run(tmp_path).returncode == 1                      # "old" is not the computed block
    assert run(tmp_path, "--update").returncode == 0
    text = (tmp_path / "README.md").read_text()
    assert f"{BEGIN}\n{TABLE.format(verdict='holds')}\n{END}" in text and text.endswith("after\n")
    assert "Training-seed spread" not in text
    assert run(tmp_path, "--exact").returncode == 0
    (tmp_path / "trends.md").write_text(TABLE.format(verdict="does not hold") + spread)
    failed = run(tmp_path)
    assert failed.returncode == 1 and "does not hold" in failed.stdout
