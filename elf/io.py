"""Atomic file output, output locks, hashing and provenance records shared by every stage.

A stage never leaves a half-written output behind: it writes into a temporary sibling and renames it
into place only when complete (``atomic_path`` / ``atomic_dir``); a log grows by whole lines
(``append_line``). ``output_lock`` keeps a second writer off an output another process is writing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from elf import __version__
from elf.cli import ElfError


def make_parent(path: Path) -> None:
    """Create ``path``'s folder; a file in the way or a read-only place is an ``ElfError``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ElfError(f"cannot create the folder of {path}: {err.strerror or err} "
                       f"({err.filename or path.parent})") from err


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary file path next to ``path``; rename it onto ``path`` on success only."""
    path = Path(path)
    make_parent(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory next to ``path``; it replaces ``path`` on success only."""
    path = Path(path)
    make_parent(path)
    tmp_path = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp_path
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            shutil.rmtree(tmp_path)


def append_line(path: str | os.PathLike, line: str) -> None:
    """Append one line in a single ``write`` (O_APPEND): a kill leaves whole lines; readers of such
    logs still drop a torn last line, which only a full disk or a crash of the machine can leave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line.rstrip("\n") + "\n").encode())
    finally:
        os.close(fd)


@contextlib.contextmanager
def output_lock(path: str | os.PathLike, enabled: bool = True) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<path>.lock`` while writing ``path``; a second writer stops
    with an ``ElfError`` naming the first (pid, host, start). The kernel drops the lock when the
    holder ends, killed or not; the file stays (removing it would race with a waiting writer).
    ``enabled=False`` (a DDP rank other than 0) takes no lock."""
    if not enabled:
        yield
        return
    lock = Path(f"{os.fspath(path).rstrip('/')}.lock")
    make_parent(lock)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "an unknown process"
            raise ElfError(f"{path} is being written by {holder} (lock {lock}); wait for it to "
                           "finish, or stop it, before writing it again") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()} since "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text())


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_json(obj: Any) -> str:
    """Hex sha256 of a canonical JSON encoding (sorted keys): a config hash."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def code_version() -> str:
    """Package version plus the git commit of the checkout (``+dirty`` when it has local changes)."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return f"{__version__}+g{commit}" + (".dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return __version__


def provenance(**fields: Any) -> dict:
    """A provenance record: the producing command, the code version and whatever the stage adds."""
    return {"command": " ".join(sys.argv), "code_version": code_version(), **fields}


def recorded_path(path: str | os.PathLike, staged: str | None = None) -> str:
    """The path to record for ``path`` in provenance. ``staged`` = ``"STAGING=FINAL"`` names a folder
    being built under one name and moved to another when complete (``elf evaluate``): a path under
    STAGING is recorded under FINAL, where a reader will find it."""
    text = str(path)
    if staged:
        staging, _, final = staged.partition("=")
        if text == staging or text.startswith(staging.rstrip("/") + "/"):
            return final.rstrip("/") + text[len(staging.rstrip("/")):]
    return text

