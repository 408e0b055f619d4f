"""``elf schema``: write the configuration's JSON schema, generated from elf/config.py (elf/schema.py).

    elf schema                      # workflow/schemas/config.schema.yaml, the file the workflow uses
    elf schema --out -              # print it
"""

from __future__ import annotations

import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("schema", help="write the config's JSON schema, generated from the dataclasses",
                       description=__doc__)
    p.add_argument("--out", default=None, help="where to write it (default: "
                   "workflow/schemas/config.schema.yaml; '-': standard output)")
    p.set_defaults(func=run)


def run(args) -> None:
    from elf.schema import SCHEMA_PATH, schema_text

    text = schema_text()
    if args.out == "-":
        sys.stdout.write(text)
        return
    out = Path(args.out or SCHEMA_PATH)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"elf schema: wrote {out}")
