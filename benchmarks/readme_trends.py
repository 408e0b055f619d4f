"""Keep the README's "What the embedded default shows" equal to what a run computed.

The README quotes the trend checks of the replication review (``reports/trends.md``, written by the
``review`` rule from ``elf/report/trends.py``; its verdict table, not the training-seed spread tables
after it) between two marker lines. This script compares the
quoted block with the file: every claim must have the same verdict (the digits may move a little on
another machine: CPU float reductions depend on the thread count), and ``--exact`` asks for the same
text. It exits 1 with a diff when they differ; ``--update`` rewrites the block from the file instead.
Run it after ``snakemake --cores all`` on a fresh clone:

    python benchmarks/readme_trends.py            # check the verdicts
    python benchmarks/readme_trends.py --update   # regenerate the README block
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

BEGIN = "<!-- trends: generated from reports/trends.md by benchmarks/readme_trends.py -->"
END = "<!-- trends: end -->"


def split(readme: str, begin: str = BEGIN, end: str = END) -> tuple[str, str, str]:
    """(text before the block, the block, text after) for the marker lines ``begin`` / ``end``."""
    if begin not in readme or end not in readme:
        raise SystemExit(f"README has no block between {begin!r} and {end!r}")
    head, rest = readme.split(begin, 1)
    block, tail = rest.split(end, 1)
    return head, block.strip("\n"), tail


def verdicts(block: str) -> list[tuple[str, str]]:
    """(claim, verdict) of every row of a trends table."""
    rows = [line.split("|") for line in block.splitlines() if line.startswith("| ") and "**" in line]
    return [(cells[1].strip(), cells[-2].strip()) for cells in rows]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--readme", default="README.md")
    p.add_argument("--trends", default="reports/trends.md")
    p.add_argument("--update", action="store_true", help="rewrite the README block from --trends")
    p.add_argument("--exact", action="store_true", help="the same text, not only the same verdicts")
    args = p.parse_args()
    readme, trends = Path(args.readme), Path(args.trends)
    if not trends.is_file():
        raise SystemExit(f"{trends} not found: run the DAG first (snakemake --cores all)")
    head, block, tail = split(readme.read_text())
    computed = trends.read_text().split("\n### ", 1)[0].strip("\n")   # the verdicts, not the spread tables
    if args.update:
        readme.write_text(f"{head}{BEGIN}\n{computed}\n{END}{tail}")
        print(f"{readme}: block rewritten from {trends}")
        return 0
    if block == computed or (not args.exact and verdicts(block) == verdicts(computed)):
        print(f"{readme} quotes {trends}: {'the same text' if block == computed else 'the same verdicts'}")
        return 0
    sys.stdout.writelines(difflib.unified_diff(block.splitlines(True), computed.splitlines(True),
                                               fromfile=f"{readme} (quoted)", tofile=str(trends)))
    return 1


if __name__ == "__main__":
    sys.exit(main())
