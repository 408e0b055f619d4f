"""``elf corpora``: generate the embedded corpora (synthetic OWT, WMT and XSum stand-ins; no downloads).

Reads: ``--settings`` (``CorporaSettings`` JSON: seed and split sizes).
Writes ``--out`` (atomically): ``owt/``, ``wmt/``, ``xsum/`` — ``DatasetDict``s saved with
``save_to_disk`` in the hub schemas (owt: ``text``, splits train/validation/test/heldout; wmt:
``translation`` = {de, en}; xsum: ``document``, ``summary``, ``id``) — and ``provenance.json``.
The same settings give byte-identical files. The grammar is described in ``elf.data.corpora``.

Example:
    elf corpora --settings '{"seed": 0, "train_docs": 2000}' --out results/corpora
"""

from __future__ import annotations

import json
from pathlib import Path

from elf.cli import ElfError
from elf.config import ConfigError, CorporaSettings, from_dict, to_dict
from elf.io import atomic_dir, provenance, write_json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "corpora", help="generate the embedded corpora (owt, wmt, xsum)",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", required=True, help="CorporaSettings as JSON")
    parser.add_argument("--out", required=True, help="output folder (gets owt/, wmt/, xsum/)")
    parser.set_defaults(func=run)


def run(args) -> None:
    from elf.data.corpora import build_corpora

    try:
        settings = from_dict(CorporaSettings, json.loads(args.settings), "corpora")
    except (ConfigError, json.JSONDecodeError) as err:
        raise ElfError(f"--settings: {err}") from err
    corpora = build_corpora(settings)
    with atomic_dir(args.out) as tmp:
        for name, splits in corpora.items():
            splits.save_to_disk(str(Path(tmp) / name))
        sizes = {name: {split: len(ds) for split, ds in splits.items()}
                 for name, splits in corpora.items()}
        write_json(Path(tmp) / "provenance.json",
                   provenance(settings=to_dict(settings), sizes=sizes))
