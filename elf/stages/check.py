"""``elf check``: validate config files as ``snakemake -n`` does, before any rule (elf/validate.py).

Reads each ``--configfile`` strictly (a syntax error or a duplicate key names the file and line; for a
``--configfile`` Snakemake's own loader reports syntax errors without either), merges them in order as
Snakemake does, and applies every key, cross-field and file-system rule. Writes nothing; exit 0 with a
one-line summary, or 2 with the refusal.

    elf check --configfile config/ci.yaml
"""

from __future__ import annotations

from elf.errors import ElfError


def register(sub) -> None:
    p = sub.add_parser("check", help="validate config files as the workflow does, writing nothing",
                       description=__doc__)
    p.add_argument("--configfile", nargs="+", required=True, help="config YAML file(s), merged in order")
    p.set_defaults(func=run)


def run(args) -> None:
    from elf.config import ConfigError, deep_merge
    from elf.validate import load_yaml, validate_workflow_config

    try:
        config: dict = {}
        for path in args.configfile:
            config = deep_merge(config, load_yaml(path))  # as Snakemake merges them
        exp = validate_workflow_config(config, args.configfile)
    except ConfigError as err:
        raise ElfError(f"invalid configuration: {err}") from err
    print(f"elf check: {', '.join(args.configfile)}: valid ({len(exp.runs)} runs, {len(exp.samplers)} "
          f"samplers, {len(exp.figures)} figures and tables)")
