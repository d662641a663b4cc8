"""The view cache's entries: keyed by the input's content identity, written once,
published atomically, checked on every read.

An input's identity is :func:`nsysdiag.fileio.content_identity` (device, inode, size,
mtime, ctime and sampled bytes of each file); it is taken again after every read of the
input; a change means the input was rewritten while it was read, and nothing read from it
is kept.

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
import json
import os
import secrets
import sys
import zlib
from pathlib import Path

from ..formatting import printable

#: bytes per read when checking a cached file's CRC-32
CHUNK = 4 << 20


def note(message: str) -> None:
    """One line on stderr about something nsysdiag repaired on its own."""
    try:
        sys.stderr.write(f"nsysdiag: note: {printable(message)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # a closed stderr must not turn a repair into a failure


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
