"""Wildcard regexes of the workflow: a regex matching exactly a set of names (runs of one kind,
figure ids of one kind, sharded datasets), for Snakemake's ``wildcard_constraints``."""

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
