"""The view cache's entries: keyed by the input's content identity, written once,
published atomically, checked on every read.

An input's identity (:func:`content_identity`) is, per file, its device, inode, size,
mtime and ctime and a hash of sampled blocks (head, tail, 16 evenly spaced blocks): a file
rewritten in place with the same size and mtime still gets a new ctime, and one copied
over with the same stat fields differs in its sampled bytes. :func:`content_identity` is
taken again after every read of the input; a change means the input was rewritten while
it was read, and nothing read from it is kept.

A view's entry is two files in the entry directory:

``<view>-<random>.parquet``  the data, written once under its own unique name and never
                             renamed or replaced, so a reader that has it open (DuckDB
                             opens a file again for each query) always sees one file
``<view>.json``              the record ``{"file", "size", "crc32"}``, published with
                             ``os.link`` (which fails when it exists: the first builder
                             wins, a concurrent builder drops its own file and uses the
                             winner's); never replaced

A record is read back (:meth:`ViewFiles.lookup`) only when its file has the recorded size
and CRC-32: DuckDB does not verify Parquet page checksums, so a flipped byte would
otherwise give wrong sums. A damaged entry is removed with a one-line note on stderr and
built again.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import stat
import sys
import zlib
from pathlib import Path

from ..formatting import printable

#: bytes hashed at the head and at the tail of each file of the input
EDGE_BYTES = 64 << 10
#: blocks hashed between head and tail, evenly spaced, and their size
SAMPLES, SAMPLE_BYTES = 16, 4 << 10
#: bytes per read when checking a cached file's CRC-32
CHUNK = 4 << 20


def note(message: str) -> None:
    """One line on stderr about something nsysdiag repaired on its own."""
    try:
        sys.stderr.write(f"nsysdiag: note: {printable(message)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # a closed stderr must not turn a repair into a failure


def _files(path: Path) -> list[Path]:
    """The regular files an input consists of: itself, or a directory's (not recursive)."""
    if path.is_dir():
        return sorted(Path(e.path) for e in os.scandir(path) if e.is_file())
    return [path]


def _sampled(fh, size: int) -> bytes:  # noqa: ANN001 - a binary file object
    """The bytes :func:`content_identity` hashes: head, tail and evenly spaced blocks."""
    if size <= 2 * EDGE_BYTES + SAMPLES * SAMPLE_BYTES:
        return fh.read()
    parts = [fh.read(EDGE_BYTES)]
    step = (size - 2 * EDGE_BYTES) // (SAMPLES + 1)
    for i in range(1, SAMPLES + 1):
        fh.seek(EDGE_BYTES + i * step)
        parts.append(fh.read(SAMPLE_BYTES))
    fh.seek(size - EDGE_BYTES)
    parts.append(fh.read(EDGE_BYTES))
    return b"".join(parts)


def content_identity(path: Path) -> str:
    """A key that changes whenever the content of the input at ``path`` may have changed
    (see the module's docstring)."""
    h = hashlib.blake2b(f"{Path(path).resolve()}".encode(), digest_size=12)
    for f in _files(Path(path)):
        if not stat.S_ISREG(os.stat(f).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(f))  # never open a FIFO
        with open(f, "rb") as fh:
            st = os.fstat(fh.fileno())
            h.update(f"|{f.name}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|"
                     f"{st.st_ctime_ns}|".encode())
            h.update(_sampled(fh, st.st_size))
    return h.hexdigest()


def file_crc(path: Path) -> tuple[int, int]:
    """(size, CRC-32) of a file's content."""
    crc, size = 0, 0
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return size, crc


class ViewFiles:
    """The published view files of one cache entry directory."""

    def __init__(self, directory: Path):
        self.directory = directory

    def new_file(self, name: str) -> Path:
        """A unique path to write view ``name`` to, once (then :meth:`publish` it)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        return self.directory / f"{name}-{secrets.token_hex(8)}.parquet"

    def _record(self, name: str) -> Path:
        return self.directory / f"{name}.json"

    def lookup(self, name: str) -> Path | None:
        """The file of view ``name`` when published and intact; None when absent. A
        damaged entry (record or file) is removed, with a note, and None returned."""
        record = self._record(name)
        try:
            text = record.read_text()
        except OSError:
            return None  # absent, or the cache unreadable (building then says so)
        try:
            data = json.loads(text)
            file = self.directory / data["file"]
            if Path(data["file"]).name != data["file"] or not isinstance(data["crc32"], int):
                raise ValueError("bad record")
            size, crc = file_crc(file)
            if (size, crc) != (data["size"], data["crc32"]):
                raise ValueError(f"{file.name} does not match its recorded size and CRC-32")
        except FileNotFoundError:
            problem = "its file is missing"
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            problem = str(exc) if "CRC" in str(exc) else "its record is unreadable"
        else:
            return file
        note(f"cached view {name} in {self.directory} is damaged ({problem}); rebuilding it")
        self.discard(name)
        return None

    def discard(self, name: str) -> None:
        """Remove the entry of view ``name`` (record and file); a reader that has the file
        open keeps reading it."""
        record = self._record(name)
        try:
            file = json.loads(record.read_text()).get("file")
        except (OSError, ValueError, AttributeError):
            file = None
        record.unlink(missing_ok=True)
        if isinstance(file, str) and Path(file).name == file and file.startswith(f"{name}-"):
            (self.directory / file).unlink(missing_ok=True)

    @staticmethod
    def _create(tmp: Path, record: Path) -> None:
        """Make the complete ``tmp`` the ``record`` unless one exists (FileExistsError),
        by a hard link. Where the file system has no hard links the record is renamed into
        place instead: a record is read whole and names a file that is never changed, so
        a concurrent builder's record replacing it only leaves one file unused."""
        try:
            os.link(tmp, record)
        except FileExistsError:
            raise
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK,
                                 errno.ENOSYS):
                raise
            os.replace(tmp, record)

    def publish(self, name: str, file: Path) -> Path:
        """Publish ``file`` (from :meth:`new_file`, complete) as view ``name``; returns the
        file to read, which is another process' when it published first."""
        size, crc = file_crc(file)
        text = json.dumps({"file": file.name, "size": size, "crc32": crc})
        tmp = self.directory / f".{name}-{secrets.token_hex(8)}.json.tmp"
        try:
            tmp.write_text(text)
            for _ in range(2):
                try:
                    self._create(tmp, self._record(name))
                    return file
                except FileExistsError:
                    theirs = self.lookup(name)  # None when it was damaged, and removed
                    if theirs is not None:
                        file.unlink(missing_ok=True)
                        return theirs
            raise OSError(errno.EEXIST, f"could not publish view {name}")
        finally:
            tmp.unlink(missing_ok=True)
