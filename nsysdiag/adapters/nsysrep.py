"""Raw Nsight Systems reports (``.nsys-rep``, ``.qdrep``): export them to SQLite with ``nsys``.

nsysdiag reads SQLite exports. A raw report is first turned into one by running the Nsight
Systems CLI (``nsys export --type sqlite``); the export is kept in a cache so the next run
on the same, unchanged report reads it straight away (``docs/raw-reports.md``).

Guarantees:

* the input is never written: nsys opens its input read-write (it does as root, falling
  back to read-only only when refused), so it is given a private read-only *copy* in a
  temporary directory, and any side files it writes land there too;
* the export is written atomically: into a temporary directory inside the cache
  directory, then ``os.replace``-d into place, so a half-written export is never seen;
* nsys is run with an argument list, never through a shell.

Which reports an nsys can read depends on its version: an nsys reads reports recorded by
the same or older versions only (Debian's 2022.4 CLI reads 2020.3-2022.4 reports; 2023.1+
reports fail with ``ProtobufParseException`` or ``Version number is invalid``).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
from pathlib import Path

from .. import config
from ..engine import threads
from ..errors import InputError, NsysNotFoundError
from ..fileio import content_identity

#: Bumped when the layout or the way exports are made changes, so old cache entries are
#: not reused.
CACHE_KEY_VERSION = "nsysrep-v1"

#: Where installers put nsys when it is not on PATH. Globbed in this order; among the
#: matches, paths naming a newer version (``2024.5.1`` > ``2022.4.2``) come first, since a
#: newer nsys reads every report an older one does.
WELL_KNOWN_GLOBS: tuple[str, ...] = (
    # NVIDIA's installers (.run/.deb/.rpm) and the nsight-systems-cli package
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems/*/target-linux-*/nsys",
    "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
    "/opt/nvidia/nsight-systems-cli/*/target-linux-*/nsys",
    "/opt/nvidia/nsight-systems*/bin/nsys",
    # the CUDA toolkit
    "/usr/local/cuda/bin/nsys",
    "/usr/local/cuda-*/bin/nsys",
    "/usr/local/cuda*/nsight-systems-*/bin/nsys",
    # Debian/Ubuntu: nsight-systems (bin/) and nsight-systems-target (target-linux-*/ only)
    "/usr/lib/nsight-systems*/bin/nsys",
    "/usr/lib/*/nsight-systems*/target-linux-*/nsys",
    "/usr/lib/nsight-systems*/target-linux-*/nsys",
)

INSTALL_HINT = (
    "install NVIDIA Nsight Systems (Debian non-free package nsight-systems) "
    "or pass --nsys / set " + config.NSYS_ENV
)

#: stderr markers of a report recorded by a newer nsys than the one running
_TOO_NEW_MARKERS = ("Version number is invalid", "ProtobufParseException", "SessionState")

_VERSION_IN_PATH = re.compile(r"(20\d\d)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?")
_PROGRESS = re.compile(r"\[[= ]*\d+%[= ]*\]\s*$")
_REPORT_VERSION = re.compile(r"\b(20\d\d)@(\d+)@(\d+)@(\d+)")
_MAX_SUMMARY = 300


# ------------------------------------------------------------------ finding nsys


def _executable(candidate: str) -> str | None:
    """``candidate`` as an absolute path when it names a runnable file, else None.

    A bare name is looked up on PATH; a directory may hold ``nsys`` or ``bin/nsys``.
    """
    p = Path(candidate).expanduser()
    if p.is_dir():
        for sub in ("nsys", "bin/nsys", "nsys.exe", "bin/nsys.exe"):
            q = p / sub
            if q.is_file() and os.access(q, os.X_OK):
                return os.path.abspath(q)
        return None
    if p.is_file():
        return os.path.abspath(p) if os.access(p, os.X_OK) else None
    if os.sep in candidate or (os.altsep and os.altsep in candidate):
        return None
    return shutil.which(candidate)


def _path_version(path: str) -> tuple[int, ...]:
    m = _VERSION_IN_PATH.search(path)
    return tuple(int(g) for g in m.groups() if g is not None) if m else ()


def _well_known() -> list[str]:
    found: list[str] = []
    seen: set[str] = set()
    for pattern in WELL_KNOWN_GLOBS:
        for hit in sorted(glob.glob(pattern)):
            exe = _executable(hit)
            if exe is None:
                continue
            real = os.path.realpath(exe)
            if real in seen:
                continue
            seen.add(real)
            found.append(exe)
    # stable: equal versions (or none) keep the glob order above
    found.sort(key=_path_version, reverse=True)
    return found


def _locate(explicit: str | None) -> tuple[str | None, str]:
    """(nsys path or None, what chose it) -- the second part is for messages; it is empty
    when nothing was given and nothing was found."""
    if explicit:
        return _executable(explicit), f"--nsys {explicit!r}"
    env = os.environ.get(config.NSYS_ENV)
    if env:
        return _executable(env), f"${config.NSYS_ENV}={env!r}"
    on_path = shutil.which("nsys")
    if on_path:
        return on_path, "PATH"
    known = _well_known()
    if known:
        return known[0], "well-known install directories"
    return None, ""


def find_nsys(explicit: str | None = None) -> str | None:
    """The nsys executable to use, or None when there is none.

    Looked for in this order, the first one given deciding:

    1. ``explicit`` (the ``--nsys`` option): a path to nsys, a directory holding
       ``nsys`` or ``bin/nsys``, or a command name looked up on PATH;
    2. ``$NSYSDIAG_NSYS``, read the same way;
    3. ``nsys`` on PATH;
    4. well-known install directories (:data:`WELL_KNOWN_GLOBS`: ``/opt/nvidia/nsight-systems*``,
       ``/usr/local/cuda*/bin``, Debian's ``/usr/lib/nsight-systems`` and
       ``/usr/lib/<arch>/nsight-systems/target-linux-*``), newest version first.

    An explicit value or environment variable that names no runnable nsys gives None: it
    is not silently replaced by another nsys.
    """
    return _locate(explicit)[0]


# ------------------------------------------------------------------ exporting


def _cache_key(identity: str) -> str:
    ident = f"{CACHE_KEY_VERSION}\n{identity}"
    return hashlib.sha256(ident.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _safe_stem(path: Path) -> str:
    stem = path.name
    for suffix in (".nsys-rep", ".qdrep"):
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._")[:60]
    return stem or "report"


def cached_export_path(path: Path, *, cache_dir: Path | None = None) -> Path:
    """Where :func:`export_report` keeps (or will keep) the SQLite export of ``path``.

    Keyed by the input's content identity (:func:`nsysdiag.fileio.content_identity`:
    resolved path, device, inode, size, mtime, ctime and sampled bytes): a report that is
    changed, replaced (even with the same size and mtime) or moved is exported again.
    """
    return _export_path(Path(path), content_identity(Path(path)), cache_dir)


def _export_path(src: Path, identity: str, cache_dir: Path | None) -> Path:
    root = Path(cache_dir) if cache_dir is not None else config.cache_dir() / "exports"
    return root / f"{_safe_stem(src)}-{_cache_key(identity)}.sqlite"


def _meaningful_lines(text: str) -> list[str]:
    lines = []
    for raw in re.split(r"[\r\n]+", text):
        line = raw.strip()
        if not line or _PROGRESS.search(line):
            continue
        lines.append(line)
    return lines


def _summarize_stderr(text: str, returncode: int) -> str:
    """One line out of nsys's own error output."""
    lines = _meaningful_lines(text)
    what = protobuf = primary = None
    for line in lines:
        if line.startswith("std::exception::what:"):
            what = line[len("std::exception::what:") :].strip()
        elif line.startswith("[libprotobuf ERROR") and "]" in line:
            protobuf = line.split("]", 1)[1].strip()
        elif line.startswith("Dynamic exception type:") or "Throw in function" in line:
            continue
        elif primary is None and line.startswith(("Exportation error:", "Error:", "error:")):
            primary = line
    if primary:
        summary = primary
    elif what:
        summary = what + (f": {protobuf}" if protobuf else "")
    elif lines:
        summary = lines[-1]
    else:
        summary = f"nsys exited with status {returncode} and printed no error"
    m = _REPORT_VERSION.search(summary)
    if m:
        summary += f" (report recorded with nsys {'.'.join(m.groups())})"
    summary = " ".join(summary.split())
    if len(summary) > _MAX_SUMMARY:
        summary = summary[: _MAX_SUMMARY - 3] + "..."
    return summary


def _nsys_version(nsys: str) -> str | None:
    try:
        out = subprocess.run(
            [nsys, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d{4}\.\d+(?:\.\d+)*)", out)
    return m.group(1) if m else None


def _run(cmd: list[str], *, cwd: Path, timeout_s: float) -> tuple[int, str]:
    """Run ``cmd`` (no shell) in its own process group; (returncode, stderr+stdout).

    On timeout (or an interrupt) the whole group is killed and the exception re-raised.
    """
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:  # the timeout, or Ctrl-C: nsys is in its own session, end it too
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        # the pipes close when the group is gone; a child that left the group could hold
        # them open: wait for it within the stage bound only
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=threads.stage_timeout())
        raise
    text = err.decode("utf-8", "replace") + "\n" + out.decode("utf-8", "replace")
    return proc.returncode, text


def export_report(
    path: Path,
    *,
    nsys: str | None = None,
    cache_dir: Path | None = None,
    timeout_s: float = 600,
) -> Path:
    """Export the raw report ``path`` to SQLite and return the export's path.

    The export lives in ``cache_dir`` (default ``nsysdiag.config.cache_dir() / "exports"``),
    never next to the input, named after the input's identity (see
    :func:`cached_export_path`); when it is already there nsys is not run.

    Raises
    ------
    NsysNotFoundError
        No usable nsys (see :func:`find_nsys`), and no cached export.
    InputError
        The input is missing or not a file, nsys failed on it (for example a report
        recorded by a newer nsys), nsys ran longer than ``timeout_s`` seconds, or the
        cache directory cannot be written.
    """
    src = Path(path)
    try:
        st = src.stat()
    except FileNotFoundError:
        raise InputError("no such file or directory", path=str(src)) from None
    except OSError as exc:
        raise InputError(f"cannot be read ({exc.strerror})", path=str(src)) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError("not a regular file", path=str(src))
    try:
        identity = content_identity(src)
    except OSError as exc:
        raise InputError(f"cannot be read ({exc.strerror or exc})", path=str(src)) from None

    out = _export_path(src, identity, cache_dir)
    root = out.parent
    if out.is_file():
        return out

    exe, looked = _locate(nsys)
    if exe is None:
        if looked:  # an explicit --nsys or $NSYSDIAG_NSYS that does not work
            message = f"{looked} names no runnable nsys (Nsight Systems CLI)"
        else:
            message = (
                "no nsys (Nsight Systems CLI) on PATH or in the usual install directories; "
                "it is needed to export raw reports"
            )
        raise NsysNotFoundError(message, path=str(src), hint=INSTALL_HINT)

    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=root))
    except OSError as exc:
        raise InputError(
            f"cannot create the export cache directory {root} ({exc.strerror})",
            path=str(src),
            hint=f"set {config.CACHE_ENV} to a writable directory",
        ) from None
    try:
        # nsys opens its input read-write (as root that succeeds even on a read-only
        # file): hand it a private copy so the user's report can never be touched.
        suffix = src.suffix if src.suffix.lower() in (".nsys-rep", ".qdrep") else ".nsys-rep"
        copy = tmp / f"input{suffix}"
        try:
            shutil.copyfile(src, copy)
            os.chmod(copy, 0o444)
        except OSError as exc:
            raise InputError(
                f"cannot copy the report for export ({exc.strerror})", path=str(src)
            ) from None
        try:
            same = content_identity(src) == identity
        except OSError:
            same = False
        if not same:
            raise InputError(
                "the report changed while it was being read",
                path=str(src),
                hint="wait until nsys has finished writing it",
            )

        tmp_out = tmp / "export.sqlite"
        cmd = [
            exe, "export",
            "--type", "sqlite",
            "--force-overwrite", "true",
            "--output", str(tmp_out),
            str(copy),
        ]  # fmt: skip
        try:
            rc, text = _run(cmd, cwd=tmp, timeout_s=timeout_s)
        except subprocess.TimeoutExpired:
            raise InputError(
                f"nsys export did not finish within {timeout_s:g} s",
                path=str(src),
                hint="export it by hand: `nsys export --type sqlite REPORT`, and pass the .sqlite",
            ) from None
        except OSError as exc:
            raise NsysNotFoundError(
                f"cannot run nsys at {exe} ({exc.strerror})", path=str(src), hint=INSTALL_HINT
            ) from None

        if rc != 0:
            summary = _summarize_stderr(text, rc)
            if any(m in text for m in _TOO_NEW_MARKERS):
                version = _nsys_version(exe)
                this = f"nsys {version}" if version else "this nsys"
                hint = (
                    f"the report was probably recorded by a newer Nsight Systems than {this}; "
                    "export it with that version or newer: "
                    f"`nsys export --type sqlite {src.name}`, and pass the .sqlite"
                )
            else:
                hint = (
                    "check that it is a complete Nsight Systems report, or export it by hand: "
                    f"`nsys export --type sqlite {src.name}`"
                )
            raise InputError(f"nsys export failed: {summary}", path=str(src), hint=hint)

        try:
            with tmp_out.open("rb") as fh:
                head = fh.read(16)
        except OSError:
            head = b""
        if head != b"SQLite format 3\x00":
            summary = _summarize_stderr(text, rc) if _meaningful_lines(text) else None
            raise InputError(
                "nsys export wrote no SQLite file" + (f": {summary}" if summary else ""),
                path=str(src),
                hint=f"export it by hand: `nsys export --type sqlite {src.name}`",
            )
        try:
            os.chmod(tmp_out, 0o644)
            os.replace(tmp_out, out)
        except OSError as exc:
            raise InputError(
                f"cannot store the export in {root} ({exc.strerror})",
                path=str(src),
                hint=f"set {config.CACHE_ENV} to a writable directory",
            ) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
