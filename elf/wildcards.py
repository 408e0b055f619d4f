"""Wildcard regexes of the workflow, for Snakemake's ``wildcard_constraints``: a regex matching exactly
a set of names (figure ids of one kind, sharded datasets, distillation and released runs), or any
path component but a set of names (the training runs: every run but those).

Snakemake writes a rule's constraints into its output patterns and rewrites those patterns for every
job, so a constraint's length is paid per job: a regex spelling each of 10,000 training runs made
``snakemake -n`` superlinear (issue 26). The larger kind is therefore named by what it is not."""

from __future__ import annotations

import re


def alternatives(names) -> str:
    """A wildcard regex matching exactly ``names`` (none: a regex that matches nothing), as a trie:
    at each character one branch at most can continue, so matching a path costs its length, not the
    number of names (a flat ``a|b|...`` over 10,000 runs made Snakemake's DAG quadratic: issue 26)."""
    trie: dict = {}
    for name in names:
        node = trie
        for char in name:
            node = node.setdefault(char, {})
        node[""] = {}  # a name ends here
    return _trie_regex(trie) if trie else "(?!)"


def _trie_regex(node: dict) -> str:
    ends = "" in node
    branches = [re.escape(char) + _trie_regex(child) for char, child in node.items() if char]
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 and not ends else f"(?:{'|'.join(branches)})"
    return f"{body}?" if ends else body


def not_one_of(names) -> str:
    """A wildcard regex matching any path component (no ``/``) except exactly one of ``names``: a
    negative lookahead over their trie, the name ending at a ``/`` or at the end of the path."""
    names = list(names)
    if not names:
        return "[^/]+"
    return f"(?!(?:{alternatives(names)})(?:/|$))[^/]+"
