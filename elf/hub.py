"""Hugging Face Hub references pinned to a revision: ``hub:name@revision``.

A pretrained tokenizer, encoder or scorer travels between rules as one string (``--tokenizer``,
``--encoder``): ``hub:``, its Hub id, and after an ``@`` the revision the config pins
(``hub:t5-small@<commit>``). ``pretrained_ref`` builds it from a config entry whose ``source`` is
``pretrained`` (an existing local folder stays a path), so a Hub id is only ever used where the
config says so; ``pretrained_kwargs``
turns a reference into ``from_pretrained`` arguments: a ``hub:`` reference goes
to the Hub, anything else must be a local file or folder that exists and is never sent there (a typo
in a path would otherwise become a Hub request). ``split_ref`` only parses a recorded reference.
Hub ids cannot contain ``@``.
"""

from __future__ import annotations

import re
from pathlib import Path

HUB_PREFIX = "hub:"
# Where huggingface_hub caches a file: .../snapshots/<commit>/<path in repo>.
SNAPSHOT_COMMIT = re.compile(r"[/\\]snapshots[/\\]([0-9a-f]{40})[/\\]")


def hub_ref(name: str, revision: str | None) -> str:
    """``hub:name@revision``, or ``hub:name`` when no revision is pinned."""
    return f"{HUB_PREFIX}{name}@{revision}" if revision else f"{HUB_PREFIX}{name}"


def pretrained_ref(name_or_path: str, revision: str | None) -> str:
    """The reference of a ``source: pretrained`` entry: an existing local folder as itself (as
    ``from_pretrained`` would read it), else the Hub id as ``hub_ref``."""
    return str(name_or_path) if Path(name_or_path).exists() else hub_ref(name_or_path, revision)


def is_hub_ref(ref: str) -> bool:
    return str(ref).startswith(HUB_PREFIX)


def split_ref(ref: str) -> tuple[str, str | None]:
    """``(name, revision)`` of a reference as recorded (``hub:`` dropped; records made before the
    prefix read the same); an existing local path is never split."""
    ref = str(ref)
    ref = ref[len(HUB_PREFIX):] if is_hub_ref(ref) else ref
    if "@" not in ref or Path(ref).exists():
        return ref, None
    name, revision = ref.rsplit("@", 1)
    return name, revision or None


def pretrained_kwargs(ref: str, what: str = "model") -> tuple[str, dict]:
    """The ``from_pretrained`` name and keywords (``revision``) of a reference; a reference without
    ``hub:`` that is not an existing local path is refused (``ElfError``), never looked up online."""
    from elf.errors import ElfError

    ref = str(ref)
    if is_hub_ref(ref):
        name, revision = split_ref(ref)
        return name, ({"revision": revision} if revision else {})
    if not Path(ref).exists():
        raise ElfError(f"{what} {ref!r}: no such local file or folder (a path is never sent to the "
                       f"Hub; a Hub id is written {HUB_PREFIX}<id>[@revision], as the workflow does "
                       "for source: pretrained)")
    return ref, {}


def snapshot_commit(local_path: str | Path) -> str | None:
    """The commit a file fetched from the Hub was cached under, if its path shows one."""
    match = SNAPSHOT_COMMIT.search(str(local_path))
    return match.group(1) if match else None
