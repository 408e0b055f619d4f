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

from pathlib import Path

from elf.artifacts.names import PROVENANCE_FILE
from elf.config import CorporaSettings, to_dict
from elf.io import atomic_dir, provenance, write_json
from elf.stages.args import parse_settings


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "corpora", help="generate the embedded corpora (owt, wmt, xsum)",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", required=True, help="CorporaSettings as JSON")
    parser.add_argument("--out", required=True, help="output folder (gets owt/, wmt/, xsum/)")
    parser.set_defaults(func=run)


def run(args) -> None:
    write_corpora(parse_settings(args.settings, CorporaSettings, "corpora"), Path(args.out))


def write_corpora(settings: CorporaSettings, out: Path) -> None:
    from elf.data.corpora import build_corpora

    corpora = build_corpora(settings)
    with atomic_dir(out) as tmp:
        for name, splits in corpora.items():
            splits.save_to_disk(str(Path(tmp) / name))
        sizes = {name: {split: len(ds) for split, ds in splits.items()}
                 for name, splits in corpora.items()}
        write_json(Path(tmp) / PROVENANCE_FILE,
                   provenance(settings=to_dict(settings), sizes=sizes))
