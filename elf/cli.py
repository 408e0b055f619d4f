"""The ``elf`` command: one subcommand per pipeline stage.

Each stage lives in ``elf/stages/<name>.py`` and exposes ``register(subparsers)``; this module only
collects them. Run ``elf <stage> --help`` for a stage's inputs, outputs and options.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from elf.errors import ElfError

__all__ = ["ElfError", "build_parser", "main"]

# DAG order; each name is a module under elf.stages.
STAGES = ("corpora", "tokenizer", "prepare", "encoder", "scorer", "embed", "decoder", "train", "distill",
          "release", "sample", "trajectory", "score", "aggregate", "evaluate", "report", "audit",
          "check", "schema", "shapes")


class StageParser(argparse.ArgumentParser):
    """A stage's parser: its description (the module docstring) is shown as written, so that example
    commands keep their lines and continuations."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser(stages: tuple[str, ...] = STAGES) -> argparse.ArgumentParser:
    """The ``elf`` parser with the subcommands of ``stages`` (each imports its module)."""
    parser = argparse.ArgumentParser(
        prog="elf", description="ELF: Embedded Language Flows — pipeline stages. "
        "Snakemake runs these for you (see README); each can also be run by hand.")
    sub = parser.add_subparsers(dest="stage", required=True, metavar="STAGE", parser_class=StageParser)
    for name in stages:
        importlib.import_module(f"elf.stages.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # A pipeline job runs one stage: import only that module (importing every stage pulls in torch,
    # transformers, pandas and matplotlib, seconds per job over hundreds of jobs); `elf --help` and
    # unknown names build the full parser so argparse lists every stage.
    stage = argv[0] if argv and argv[0] in STAGES else None
    args = build_parser((stage,) if stage else STAGES).parse_args(argv)
    try:
        args.func(args)
    except ElfError as err:
        print(f"elf {args.stage}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
