"""Hugging Face Hub references pinned to a revision: ``name@revision``.

A pretrained tokenizer, encoder or scorer travels between rules as one string (``--tokenizer``,
``--encoder``): its Hub id, and after an ``@`` the revision the config pins (``t5-small@<commit>``).
``hub_ref`` builds it from a config entry, ``split_ref`` takes it apart, and ``pretrained_kwargs``
gives the ``from_pretrained`` keyword for it. Hub ids cannot contain ``@``; a local path that
exists is never split.
"""

from __future__ import annotations

import re
from pathlib import Path

# Where huggingface_hub caches a file: .../snapshots/<commit>/<path in repo>.
SNAPSHOT_COMMIT = re.compile(r"[/\\]snapshots[/\\]([0-9a-f]{40})[/\\]")


def hub_ref(name: str, revision: str | None) -> str:
    """``name@revision``, or ``name`` when no revision is pinned."""
    return f"{name}@{revision}" if revision else name


def split_ref(ref: str) -> tuple[str, str | None]:
    """``(name, revision)`` of a reference; an existing local path or a plain id has no revision."""
    ref = str(ref)
    if "@" not in ref or Path(ref).exists():
        return ref, None
    name, revision = ref.rsplit("@", 1)
    return name, revision or None


def pretrained_kwargs(ref: str) -> tuple[str, dict]:
    """The name and the ``from_pretrained`` keywords (``revision``) of a reference."""
    name, revision = split_ref(ref)
    return name, ({"revision": revision} if revision else {})


def snapshot_commit(local_path: str | Path) -> str | None:
    """The commit a file fetched from the Hub was cached under, if its path shows one."""
    match = SNAPSHOT_COMMIT.search(str(local_path))
    return match.group(1) if match else None
