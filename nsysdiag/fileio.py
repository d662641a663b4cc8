"""Files: atomic writes (a reader, or a run killed midway, never sees a half-written
file) and the content identity of an input.

An input's identity (:func:`content_identity`) is, per file, its device, inode, size,
mtime and ctime and a hash of sampled blocks (head, tail, 16 evenly spaced blocks): a file
rewritten in place with the same size and mtime still gets a new ctime, and one copied
over with the same stat fields differs in its sampled bytes. The view cache and the raw
reports' export cache are keyed by it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(path: Path, write: Callable[[str], None]) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it to ``path``.

    The directory is created when missing; the temporary file never outlives the call.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


#: bytes hashed at the head and at the tail of each file of the input
EDGE_BYTES = 64 << 10
#: blocks hashed between head and tail, evenly spaced, and their size
SAMPLES, SAMPLE_BYTES = 16, 4 << 10


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
