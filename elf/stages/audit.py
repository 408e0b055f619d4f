"""``elf audit``: print and verify the provenance chain behind a reported number.

Reads PATH — a figure or table file (png/csv/md/tex/..., through its sidecar ``<id>.json``), a
sidecar, an aggregate, a score file, a samples file or a checkpoint directory — and follows what each
artifact records: figure/table → aggregate → per-seed scores → samples → checkpoint → run config →
embedding store → dataset (plus scorer, tokenizer, encoder, reference texts and paper values).
Each link is re-hashed on disk against the hash its parent recorded (``elf/audit/``).
Writes nothing; prints an indented tree, one line per artifact: kind, path, sha256 (first 16 hex
digits; ``--json`` gives all), status (ok, MISSING, HASH CHANGED, NOT RECORDED, BROKEN; ``named`` for
a hub model named without local files). Exit code 0 when every link verifies, 2 naming the first
broken link otherwise.

    elf audit reports/figures/F4.png                     # every number of F4
    elf audit reports/figures/F4.png base/sde8/gen_ppl   # one number: run/sampler[/metric][/seedK]
    elf audit results/samples/base/sde8/seed0.jsonl --json
Recorded relative paths (``results/...``) are resolved against ``--root`` (default: the current
directory, where Snakemake runs).
"""

from __future__ import annotations

import json

from elf.errors import ElfError

SHA_SHOWN = 16


def register(subparsers) -> None:
    parser = subparsers.add_parser("audit", help="print and verify the provenance chain of a number",
                                   description=__doc__)
    parser.add_argument("path", metavar="PATH",
                        help="figure/table file or sidecar, aggregate, score, samples file or checkpoint")
    parser.add_argument("cell", metavar="CELL", nargs="?",
                        help="restrict to one number: parts run, sampler, metric, seedK joined by '/'")
    parser.add_argument("--root", help="directory recorded relative paths are relative to (default: .)")
    parser.add_argument("--json", action="store_true", help="print the chain as JSON")
    parser.set_defaults(func=run)


def _is_sha256(value) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def format_value(value) -> str:
    if _is_sha256(value):
        return value[:SHA_SHOWN] + "…"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict):
        if {"mean", "se"} <= set(value):
            if value["mean"] is None:
                return "none"
            return f"{value['mean']:.6g} ± {value['se']:.3g} (n={value.get('n')})"
        return "{" + ", ".join(f"{k}={format_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def format_info(info: dict) -> str:
    return ", ".join(f"{k}={format_value(v)}" for k, v in info.items() if v is not None)


def format_link(link) -> str:
    sha = f"sha256 {link.sha256[:SHA_SHOWN]}…" if link.sha256 else "sha256 -"
    line = f"{link.kind}  {link.path}  {sha}  {link.status}"
    if link.repeated:
        line += "  (verified; expanded above)"
    elif link.info:
        line += f"  [{format_info(link.info)}]"
    return line


def tree_lines(link, prefix: str = "", child_prefix: str = "") -> list[str]:
    """``link`` and its children as an indented tree; each problem on a ``!`` line under its link."""
    lines = [prefix + format_link(link)]
    body = child_prefix + ("│  " if link.children else "   ")
    lines += [f"{body}! {problem}" for problem in link.problems]
    for k, child in enumerate(link.children):
        last = k == len(link.children) - 1
        lines += tree_lines(child, child_prefix + ("└─ " if last else "├─ "),
                            child_prefix + ("   " if last else "│  "))
    return lines


def describe_break(link) -> str:
    """One broken link, as the error names it."""
    return f"{link.kind} {link.path}: {link.status} — {'; '.join(link.problems)}"


def run(args) -> None:
    from elf.audit import AuditError, audit

    try:
        chain = audit(args.path, args.cell, args.root)
    except AuditError as err:
        raise ElfError(str(err)) from err
    broken = chain.broken()
    if args.json:
        print(json.dumps({"path": args.path, "cell": args.cell, "complete": not broken,
                          "broken": [describe_break(link) for link in broken],
                          "chain": chain.to_dict()}, indent=2))
    else:
        print("\n".join(tree_lines(chain)))
        links = list(chain.walk())
        if not broken:
            distinct = len({(link.kind, link.path) for link in links})
            print(f"\nchain complete: {len(links)} links ({distinct} distinct artifacts) verified")
    if broken:
        more = f" (and {len(broken) - 1} more broken link(s), marked above)" if len(broken) > 1 else ""
        raise ElfError(f"provenance chain broken at {describe_break(broken[0])}{more}")
