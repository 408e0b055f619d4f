"""What every link of the audit does: resolve a recorded path, hash the file once, compare the hash
with the one its parent recorded, read the file without stopping the walk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from elf.audit.links import BROKEN, CHANGED, MISSING, NOT_RECORDED, Link, Selection
from elf.artifacts import file_sha256


class TracerBase:
    """Walks the chain from one starting file; caches file hashes and expands each link once."""

    def __init__(self, root: str | Path | None = None, selection: Selection = Selection()):
        self.root = Path(root) if root is not None else Path.cwd()
        self.selection = selection
        self._expanded: set = set()

    def resolve(self, path: str | Path) -> Path:
        path = Path(path)
        return path if path.is_absolute() else self.root / path

    def file_sha256(self, path: Path) -> str:
        return file_sha256(path)  # hashed once per process (elf.artifacts.checks)

    def first_time(self, link: Link, *key: Any) -> bool:
        """True the first time a link is met; later meetings are marked ``repeated``."""
        key = (link.kind, link.path, link.recorded, *key)
        if key in self._expanded:
            link.repeated = True
            return False
        self._expanded.add(key)
        return True

    def file_link(self, kind: str, path: str | Path, recorded: str | None, named_by: str | None,
                  is_root: bool = False) -> Link:
        """A link to one file: MISSING, HASH CHANGED, NOT RECORDED or ok."""
        resolved = self.resolve(path)
        link = Link(kind, str(resolved), recorded=recorded, named_by=named_by)
        if not resolved.is_file():
            link.fail(MISSING, f"{kind} file not found" + (f" (named by {named_by})" if named_by else ""))
            return link
        link.sha256 = self.file_sha256(resolved)
        self.compare(link, link.sha256, recorded, is_root)
        return link

    @staticmethod
    def compare(link: Link, now: str | None, recorded: str | None, is_root: bool = False) -> None:
        if is_root:
            return
        if recorded is None:
            link.fail(NOT_RECORDED, f"{link.named_by or 'its parent'} records no hash for this "
                      f"{link.kind}: it cannot be verified")
        elif now != recorded:
            link.fail(CHANGED, f"recorded sha256 {recorded[:16]}…, now {str(now)[:16]}…: the {link.kind} "
                      f"changed after {link.named_by or 'its parent'} was made from it; rerun the "
                      f"stages from here on")

    def read(self, link: Link, reader) -> Any:
        """``reader(path)`` for a present link; a failure marks the link BROKEN and returns None."""
        if link.status == MISSING:
            return None
        try:
            return reader(Path(link.path))
        except (OSError, ValueError, KeyError, TypeError) as err:
            link.fail(BROKEN, f"cannot read {link.kind}: {err}")
            return None
