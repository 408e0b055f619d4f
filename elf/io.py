"""Atomic file output, output locks, hashing and provenance records shared by every stage.

A stage never leaves a half-written output behind: it writes into a temporary sibling and renames it
into place only when complete (``atomic_path`` / ``atomic_dir``); a log grows by whole lines
(``append_line``), a resumable JSONL file by whole batches of lines (``append_jsonl``; read back by
``resume_jsonl``, restarted by ``rewrite_jsonl``). ``output_lock`` keeps a second writer off an
output another process is writing.
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
from typing import Any, Callable, Iterator

from elf import __version__
from elf.errors import ElfError


def make_parent(path: Path) -> None:
    """Create ``path``'s folder; a file in the way or a read-only place is an ``ElfError``."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ElfError(f"cannot create the folder of {path}: {err.strerror or err} "
                       f"({err.filename or path.parent})") from err


class WriteError(ElfError):
    """An output that could not be written (a full disk, no permission): nothing was replaced."""


# torch.save reports a failed write of its zip writer as a RuntimeError naming its C++ source
_TORCH_WRITE_FAILED = ("inline_container", "PytorchStreamWriter", "file write failed")


def write_failed(path: Path, err: BaseException) -> WriteError | None:
    """The one-line ``WriteError`` of a failed write of ``path``, or None if ``err`` is no write error."""
    import errno

    if isinstance(err, OSError):
        code = errno.errorcode.get(err.errno, "") if err.errno else ""
        reason = f"{err.strerror or err}" + (f" ({code})" if code else "")
    elif isinstance(err, RuntimeError) and any(w in str(err) for w in _TORCH_WRITE_FAILED):
        reason = f"the writer failed ({str(err).splitlines()[0][:120]})"
    else:
        return None
    try:
        free = f"; {shutil.disk_usage(path.parent).free:,} bytes free there"
    except OSError:
        free = ""
    return WriteError(f"cannot write {path}: {reason}{free}; nothing was replaced: the previous "
                      f"{path.name} (if any) is kept")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary file path next to ``path``; rename it onto ``path`` on success only. A
    failed write (disk full, permission) is a one-line ``WriteError`` and leaves ``path`` as it was."""
    path = Path(path)
    make_parent(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise write_failed(path, err) from err
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except (OSError, RuntimeError) as err:
        failed = write_failed(path, err)
        if failed is None or isinstance(err, ElfError):
            raise
        raise failed from err
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
    _append(path, (line.rstrip("\n") + "\n").encode())


def _append(path: str | os.PathLike, data: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as err:
        raise write_failed(Path(path), err) from err


def _jsonl(objects) -> str:
    return "".join(json.dumps(obj, ensure_ascii=False) + "\n" for obj in objects)


def rewrite_jsonl(path: str | os.PathLike, first: dict, rows: list[dict]) -> None:
    """Replace a resumable JSONL file (a first line, then rows) in one rename."""
    with atomic_path(path) as tmp:
        tmp.write_text(_jsonl([first, *rows]), encoding="utf-8")


def append_jsonl(path: str | os.PathLike, rows: list[dict]) -> None:
    """Append rows to a resumable JSONL file in one ``write`` (a kill leaves whole batches, or a
    torn last line that ``resume_jsonl`` drops)."""
    _append(path, _jsonl(rows).encode("utf-8"))


def resume_jsonl(path: str | os.PathLike, accept: Callable[[dict], bool]) -> list[dict]:
    """The rows of a resumable JSONL file whose first line ``accept`` takes (an earlier run with the
    same inputs), up to a line cut by a kill; [] when there is no file, or it is another run's."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    try:
        if not lines or not accept(json.loads(lines[0])):
            return []
    except (json.JSONDecodeError, AttributeError, TypeError):
        return []
    rows = []
    for line in lines[1:]:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by the kill
            break
    return rows


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

