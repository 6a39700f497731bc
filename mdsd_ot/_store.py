"""Crash-safe results folders: one writer, a recorded identity, rows checked on every read.

The study (:mod:`mdsd_ot.study`) streams one group of JSON rows per *record* (a prompt) into a
folder that must survive being killed at any instant, started twice, damaged by hand, filled up or
made read-only, and never mix rows that were computed under different conditions. This module is
that storage layer; it knows nothing about models or distributions, so that any pipeline producing
rows per record (a tree decoder, say) can reuse it.

A folder holds::

    config.json      {"format": 2, "kind", "identity", "shard", "expected", ...provenance}
    positions.jsonl  one JSON object per line, each naming its record in "record"
    done.txt         one JSON line per finished record: {"id": ..., "rows": k, "sha256": ...}
    .lock            locked (fcntl.flock) by the one process writing the folder; names it

How the guarantees are kept:

* **One writer.** :class:`ResultsFolder` holds an exclusive ``flock`` on ``.lock`` while it is open.
  The kernel drops the lock when the holder exits or is killed, so a stale lock cannot outlive its
  process; the pid, host, start time and command of the holder are written into the file for the
  refusal message (and, if a holder died without releasing, for a note to the next run).
* **Identity.** ``config.json`` records everything that determines a row (:func:`compare_identity`);
  reopening with anything different is refused, naming each difference.
* **Integrity.** A record counts as finished only when its done line parses and its rows are all
  present and hash to the recorded sha256 (:func:`scan_folder`). Rows are appended and fsync'd
  before the done line, which is appended in one write and fsync'd; a kill between the two leaves
  rows that no done line claims, which are dropped when the folder is reopened. Anything damaged
  is recomputed on reopening and left out, with a warning, when read.
* **Atomic replacement.** Every file that replaces another (``config.json``, a rewritten
  ``positions.jsonl`` or ``done.txt``, summaries) goes through :func:`atomic_file`: a temporary
  file in the same folder, fsync, rename over the old one, fsync of the folder.
* **OS errors** are re-raised as ``OSError`` carrying the path of the file concerned (a failed
  ``write`` has none otherwise), so that the command line can report one line.

:func:`checkpoint` is called at every step of every write and does nothing; the fault-injection
tests replace it to kill the process at an exact point.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import socket
import sys
import time
import warnings
from pathlib import Path

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, see FolderLock
    fcntl = None

__all__ = [
    "FORMAT",
    "CONFIG",
    "ROWS",
    "DONE",
    "LOCK",
    "StoreWarning",
    "StoreError",
    "FolderBusy",
    "IdentityMismatch",
    "atomic_write",
    "atomic_file",
    "check_ids",
    "digest_of",
    "fingerprint_path",
    "compare_identity",
    "read_config",
    "peek_config",
    "scan_folder",
    "read_rows",
    "lock_holder",
    "FolderLock",
    "ResultsFolder",
    "merge_folders",
    "one_line_warnings",
]

#: Version of the folder layout described in the module docstring.
FORMAT = 2
CONFIG, ROWS, DONE, LOCK = "config.json", "positions.jsonl", "done.txt", ".lock"
_TMP = ".tmp-"  # marks our temporary files: ".<name>.tmp-XXXX"
_CHUNK = 1 << 20

# the two system calls every write goes through (the simulated-fault tests patch these)
_os_write = os.write
_os_open = os.open


class StoreWarning(UserWarning):
    """Something in a results folder was damaged, incomplete or unverifiable (and was handled)."""


class StoreError(ValueError):
    """A results folder cannot be used as asked; the message says why and what to do."""


class FolderBusy(StoreError):
    """Another process is writing the folder."""


class IdentityMismatch(StoreError):
    """The folder holds results of other models, prompts or parameters."""


def checkpoint(step: str, **context) -> None:
    """Called before or after every write step (``step`` names it); does nothing.

    ``context`` may hold ``fd`` and ``data`` (the bytes about to be written), so that a test can
    write part of them and kill the process, as a crash in the middle of a ``write`` would.
    """


def _warn(message: str) -> None:
    warnings.warn(message, StoreWarning, stacklevel=3)


# ------------------------------------------------------------------------------- low-level I/O


def _with_path(exc: OSError, path) -> OSError:
    """``exc`` naming ``path`` (the OS gives no file name for a failed ``write`` or ``fsync``)."""
    if exc.errno is None:
        return exc
    return OSError(exc.errno, exc.strerror or os.strerror(exc.errno), str(path))


def _write_all(fd: int, data: bytes, path) -> None:
    view = memoryview(data)
    while view:
        try:
            n = _os_write(fd, view)
        except OSError as exc:
            raise _with_path(exc, path) from None
        view = view[n:]


def _fsync(fd: int, path) -> None:
    try:
        os.fsync(fd)
    except OSError as exc:
        raise _with_path(exc, path) from None


def fsync_dir(path) -> None:
    """Make a rename or a new file in ``path`` durable (no-op where folders cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise _with_path(exc, path) from None
    finally:
        os.close(fd)


class _Writer:
    """Buffered writes through :func:`_write_all` (str or bytes)."""

    def __init__(self, fd: int, path):
        self.fd, self.path, self._buf, self._size = fd, path, [], 0

    def write(self, data) -> None:
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._buf.append(bytes(data))
        self._size += len(data)
        if self._size >= _CHUNK:
            self.flush()

    def flush(self) -> None:
        if self._buf:
            data = b"".join(self._buf)
            self._buf, self._size = [], 0
            _write_all(self.fd, data, self.path)


@contextlib.contextmanager
def atomic_file(path, *, step: str | None = None):
    """Write ``path`` all-or-nothing: yields a writer (``.write(str | bytes)``) on a temporary file
    in the same folder, then fsync, rename over ``path``, fsync of the folder.

    On any exception (Ctrl-C included) the temporary file is removed and ``path`` is untouched; a
    killed process leaves a ``.<name>.tmp-*`` file, removed when the folder is next opened.
    OS errors name ``path``.
    """
    path = Path(path)
    step = step or path.name
    try:
        fd, tmp = _temp_file(path.parent, f".{path.name}{_TMP}")
    except OSError as exc:
        raise _with_path(exc, path) from None
    renamed = False
    try:
        checkpoint(f"{step}:temp")
        try:
            writer = _Writer(fd, path)
            yield writer
            writer.flush()
            checkpoint(f"{step}:written")
            _fsync(fd, path)
        finally:
            os.close(fd)
        checkpoint(f"{step}:synced")
        try:
            os.replace(tmp, path)
        except OSError as exc:
            raise _with_path(exc, path) from None
        renamed = True
        checkpoint(f"{step}:renamed")
        fsync_dir(path.parent)
    finally:
        if not renamed:
            with contextlib.suppress(OSError):
                tmp.unlink()


def _temp_file(folder: Path, prefix: str):
    """``(fd, path)`` of a new file ``prefix + random`` in ``folder``, created with mode 0o666 less the
    umask, as ``open()`` creates files (``tempfile.mkstemp`` makes them 0o600: results renamed from
    it were unreadable to colleagues on a shared folder whatever their umask)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    import secrets

    for _ in range(100):
        tmp = folder / f"{prefix}{secrets.token_hex(6)}"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(folder))


def atomic_write(path, data, *, step: str | None = None) -> None:
    """Replace ``path`` by ``data`` (str or bytes) atomically and durably (:func:`atomic_file`)."""
    with atomic_file(path, step=step) as fh:
        fh.write(data)


def _remove_temp_files(folder: Path) -> None:
    for p in folder.iterdir():
        if p.name.startswith(".") and _TMP in p.name and p.is_file():
            with contextlib.suppress(OSError):
                p.unlink()


# ------------------------------------------------------------------------------------ identity


def digest_of(obj) -> str:
    """sha256 of the canonical JSON of ``obj`` (sorted keys, no spaces)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=_jsonable)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _jsonable(x):
    if hasattr(x, "tolist"):  # numpy / torch scalars and arrays
        return x.tolist()
    if isinstance(x, (set, frozenset)):
        return sorted(x)
    raise TypeError(f"cannot record a {type(x).__name__} in a study identity")


def check_ids(ids, what: str = "record") -> list:
    """Validate record ids up front: strings, non-empty, one line each, unique.

    Raises ``TypeError`` / ``ValueError`` naming the offending record (by position and id).
    """
    ids = list(ids)
    seen = {}
    for i, x in enumerate(ids):
        if not isinstance(x, str):
            raise TypeError(f"{what} {i}: its id must be a string, got {type(x).__name__}")
        if not x:
            raise ValueError(f"{what} {i} has an empty id; give every {what} a non-empty 'id'")
        if x.splitlines() != [x]:
            raise ValueError(
                f"{what} {i} has the id {x!r}, which spans several lines; "
                f"ids must be one line (no newline characters)"
            )
        if x in seen:
            raise ValueError(f"{what} id {x!r} is used twice (records {seen[x]} and {i}); ids must be unique")
        seen[x] = i
    return ids


_SKIP_NAMES = ("readme", "license", "licence", "notice", "use_policy")


def _model_files(folder: Path):
    """Regular files of a model folder that can change its outputs (sorted; hidden files and
    documentation are left out)."""
    out = []
    for root, dirs, files in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            low = f.lower()
            if f.startswith(".") or low.endswith(".md") or low.startswith(_SKIP_NAMES):
                continue
            p = Path(root) / f
            if p.is_file():
                out.append(p)
    return out


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while True:
                block = fh.read(_CHUNK)
                if not block:
                    break
                h.update(block)
    except OSError as exc:
        raise _with_path(exc, path) from None
    return h.hexdigest()


def _looks_like_path(name: str) -> bool:
    return (
        os.path.isabs(name)
        or name.startswith((".", "~"))
        or name.count("/") >= 2
        or (os.sep != "/" and os.sep in name)
    )


def fingerprint_path(name, *, role: str = "model", previous: dict | None = None) -> dict:
    """Identity of a model (or tokenizer) given as a local file, a local folder or a hub name.

    Local files are identified by their **content**: the sha256 of every file that can change the
    model's outputs (weights, configuration, tokenizer files, code; documentation and hidden files
    are left out), so a copied or moved model folder is still the same model and a retrained one
    of the same size is not. Hashing runs at disk speed (about 1 GB/s here); ``previous`` (the
    entry recorded in a folder's ``config.json``) skips files whose path, size, mtime, ctime and
    inode are unchanged. A name that is not a local path is a hub name, identified by the name
    only (point ``--target`` at a local folder for a content check).

    Returns
    -------
    dict
        ``{"digest", "describe", ...}``; only ``digest`` is compared.
    """
    name = os.fspath(name)
    p = Path(os.path.expanduser(name))
    if not p.exists():
        if _looks_like_path(name):
            raise FileNotFoundError(f"{role} {name}: no such file or folder")
        head = name.split("/", 1)[0] if "/" in name else ""
        if head and os.path.isdir(head):  # "models/Qwen-05B" next to a local models/: a mistyped path
            raise FileNotFoundError(
                f"{role} {name}: no such file or folder in {head}/ (read as a local path, not a "
                f"hub name, because a local folder {head}/ exists here)"
            )
        return {
            "digest": "name:" + name,
            "name": name,
            "describe": f"{name!r} (a hub name, identified by its name only)",
        }
    files = [p] if p.is_file() else _model_files(p)
    if not files:
        raise ValueError(f"{role} folder {p} contains no model files")
    where = str(p.resolve())
    cache = {}
    if previous and previous.get("path") == where and isinstance(previous.get("stat"), dict):
        cache = previous["stat"]
    entries, stats, total = {}, {}, 0
    for f in files:
        rel = f.name if f is p else f.relative_to(p).as_posix()
        try:
            st = f.stat()
        except OSError as exc:
            raise _with_path(exc, f) from None
        key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        old = cache.get(rel)
        sha = old[4] if isinstance(old, list) and len(old) == 5 and old[:4] == key else _sha256_file(f)
        entries[rel] = [st.st_size, sha]
        stats[rel] = key + [sha]
        total += st.st_size
    digest = digest_of(entries)
    return {
        "digest": digest,
        "path": where,
        "files": entries,
        "stat": stats,
        "describe": f"{p} ({len(entries)} files, {total:,} bytes, sha256 {digest[:12]})",
    }


def _comparable(value):
    if isinstance(value, dict) and "digest" in value:
        return value["digest"]
    return value


def _describe(value) -> str:
    if isinstance(value, dict) and "digest" in value:
        return str(value.get("describe") or f"sha256 {value['digest'][:12]}")
    return json.dumps(value, sort_keys=True)


def _files_changed(old, new) -> str:
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return ""
    a, b = old.get("files"), new.get("files")
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return ""
    changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if not changed:
        return ""
    more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
    return f" (differing files: {', '.join(changed[:3])}{more})"


_ABSENT = object()


def compare_identity(old: dict, new: dict) -> list[str]:
    """One message per entry that differs between a recorded identity and a new one.

    Entries are compared by value after a JSON round trip (so lists recorded from tuples compare
    equal); a dict entry with a ``"digest"`` is compared by its digest only (its description, path
    and file-stat cache may differ).
    """
    old = json.loads(json.dumps(old, default=_jsonable))
    new = json.loads(json.dumps(new, default=_jsonable))
    out = []
    for key in list(new) + [k for k in old if k not in new]:
        a, b = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if a is not _ABSENT and b is not _ABSENT and _comparable(a) == _comparable(b):
            continue
        now = "absent" if b is _ABSENT else _describe(b)
        before = "absent" if a is _ABSENT else _describe(a)
        out.append(f"{key}: {now} now, {before} before{_files_changed(a, b)}")
    return out


# --------------------------------------------------------------------------------- config.json


def _load_config(folder: Path):
    """(state, config or None, problem): state is "ok", "missing" or "damaged"."""
    path = folder / CONFIG
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return "missing", None, "missing"
    except IsADirectoryError:
        return "damaged", None, "a folder, not a file"
    except OSError as exc:
        raise _with_path(exc, path) from None
    if not raw.strip():
        return "damaged", None, "empty"
    try:
        cfg = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        return "damaged", None, f"not valid JSON ({' '.join(str(exc).split())[:80]})"
    if not isinstance(cfg, dict):
        return "damaged", None, "not a JSON object"
    if cfg.get("format") is None and "identity" not in cfg:
        return "legacy", cfg, "written by an older mdsd_ot"
    if cfg.get("format") != FORMAT:
        return "damaged", cfg, f"of format {cfg.get('format')!r} (this mdsd_ot reads {FORMAT})"
    missing = [k for k in ("kind", "identity", "shard") if k not in cfg]
    if missing or not isinstance(cfg.get("identity"), dict):
        return "damaged", cfg, f"incomplete (no {', '.join(missing) or 'identity'})"
    return "ok", cfg, ""


def peek_config(folder) -> dict | None:
    """The folder's config if it is readable and current, else None (never raises for content)."""
    folder = Path(folder)
    if not (folder / CONFIG).is_file():
        return None
    try:
        state, cfg, _ = _load_config(folder)
    except OSError:
        return None
    return cfg if state == "ok" else None


def read_config(folder) -> dict:
    """The folder's ``config.json``; ``StoreError`` (with the path and what to do) if it is missing,
    damaged or from an older version."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder")
    state, cfg, problem = _load_config(folder)
    path = folder / CONFIG
    if state == "missing":
        raise StoreError(f"{folder} is not a results folder (no {CONFIG})")
    if state == "legacy":
        raise StoreError(
            f"{path} was written by an older mdsd_ot that did not record which models and "
            f"prompts made the rows, so they cannot be checked; use that version for it, or rerun "
            f"the study into a new folder"
        )
    if state == "damaged":
        raise StoreError(
            f"{path} is {problem}; restore it from a backup (it records which models, "
            f"prompts and parameters made the rows), or rerun into a new folder"
        )
    return cfg


# ---------------------------------------------------------------------------- rows and done list


def _read_done(folder: Path, legacy: bool):
    """(entries in order, number of damaged lines, torn last line?)."""
    path = folder / DONE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], 0, False
    except OSError as exc:
        raise _with_path(exc, path) from None
    lines = raw.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    torn = bool(tail)
    entries, bad = [], int(torn)
    for line in lines:
        if legacy:
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                bad += 1
                continue
            if text:
                entries.append({"id": text})
            continue
        try:
            e = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):
            bad += 1
            continue
        if (
            isinstance(e, dict)
            and isinstance(e.get("id"), str)
            and e["id"]
            and isinstance(e.get("rows"), int)
            and not isinstance(e.get("rows"), bool)
            and e["rows"] >= 0
            and isinstance(e.get("sha256"), str)
        ):
            entries.append({"id": e["id"], "rows": e["rows"], "sha256": e["sha256"]})
        else:
            bad += 1
    return entries, bad, torn


def _parse_row(raw: bytes):
    try:
        row = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if isinstance(row, dict) and isinstance(row.get("record"), str):
        return row
    return None


_REQUIRED = ("record", "pos", "T")


class Scan:
    """What :func:`scan_folder` found.

    Attributes
    ----------
    valid : dict
        ``{record id: done entry}`` of verified finished records, in done order.
    damaged : list of (id, reason)
        Records marked done whose rows are missing, extra or altered.
    bad_done : int
        Lines of ``done.txt`` that do not parse (a torn last line included).
    torn_done : bool
        ``done.txt`` does not end with a newline.
    stray : int
        Lines of ``positions.jsonl`` not belonging to a verified record (unfinished or damaged
        records, unparseable lines, a torn last line).
    rows : dict or None
        With ``collect=True``: ``{record id: [row dict, ...]}`` for the valid records.
    order : list
        With ``collect=True``: valid record ids in order of first appearance in the rows file.
    """

    def __init__(self):
        self.valid, self.damaged, self.bad_done, self.torn_done = {}, [], 0, False
        self.stray, self.rows, self.order, self.legacy = 0, None, [], False

    @property
    def clean(self) -> bool:
        return not (self.damaged or self.bad_done or self.stray)


def scan_folder(folder, *, legacy: bool = False, collect: bool = False) -> Scan:
    """Check every row of a folder against its done list (see the module docstring)."""
    folder = Path(folder)
    scan = Scan()
    scan.legacy = legacy
    entries, scan.bad_done, scan.torn_done = _read_done(folder, legacy)
    wanted = {}
    for e in entries:
        if e["id"] in wanted and wanted[e["id"]] != e:
            wanted[e["id"]] = None  # marked twice, differently: cannot tell which is right
        else:
            wanted[e["id"]] = e
    stats, parsed = {}, {} if collect else None
    path = folder / ROWS
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        fh = None
    except OSError as exc:
        raise _with_path(exc, path) from None
    if fh is not None:
        with fh:
            try:
                for raw in fh:
                    if not raw.endswith(b"\n"):  # torn last line
                        scan.stray += 1
                        continue
                    row = _parse_row(raw)
                    if row is None or (legacy and any(k not in row for k in _REQUIRED)):
                        scan.stray += 1
                        continue
                    rec = row["record"]
                    st = stats.get(rec)
                    if st is None:
                        st = stats[rec] = [hashlib.sha256(), 0]
                    st[0].update(raw)
                    st[1] += 1
                    if collect and wanted.get(rec):
                        parsed.setdefault(rec, []).append(row)
            except OSError as exc:
                raise _with_path(exc, path) from None
    for rec, e in wanted.items():
        st = stats.pop(rec, None)
        count = 0 if st is None else st[1]
        if e is None:
            scan.damaged.append((rec, "marked done twice with different checksums"))
        elif legacy:  # nothing to check against: a record without rows may be legitimate
            scan.valid[rec] = e
            continue
        elif count != e["rows"]:
            scan.damaged.append((rec, f"{count} of its {e['rows']} rows present"))
        elif st is not None and st[0].hexdigest() != e["sha256"]:
            scan.damaged.append((rec, "its rows differ from their recorded checksum"))
        elif st is None and e["sha256"] != hashlib.sha256(b"").hexdigest():
            scan.damaged.append((rec, "its rows differ from their recorded checksum"))
        else:
            scan.valid[rec] = e
            continue
        if st is not None:
            scan.stray += st[1]
    scan.stray += sum(st[1] for st in stats.values())  # rows of unfinished records
    if collect:
        scan.rows = {rec: parsed.get(rec, []) for rec in scan.valid}
        scan.order = [rec for rec in parsed if rec in scan.valid]
    return scan


def _warn_scan(folder: Path, scan: Scan, action: str) -> None:
    for rec, reason in scan.damaged:
        _warn(f"{folder}: record {rec!r} is marked done but {reason}; {action}")
    if scan.bad_done:
        _warn(
            f"{folder / DONE}: {scan.bad_done} damaged line(s) ignored; the records they marked "
            f"are not counted as done"
        )


def read_rows(folder) -> list[dict]:
    """Rows of the verified finished records of a folder, in file order.

    Damaged or incomplete records are left out with a :class:`StoreWarning` naming them (resuming
    the run recomputes them). A folder written before format 2 is read as it was then (done ids,
    rows that parse), with a warning that it cannot be verified.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder")
    state, cfg, problem = _load_config(folder)
    if state == "damaged":
        raise StoreError(
            f"{folder / CONFIG} is {problem}; restore it from a backup, or rerun into a new folder"
        )
    legacy = state != "ok"
    if legacy and not (folder / ROWS).exists():
        raise FileNotFoundError(f"{folder} is not a results folder (no {ROWS})")
    if legacy:
        _warn(
            f"{folder} was not written by this mdsd_ot version (no identity or row checksums in "
            f"{CONFIG}); its rows are read without verification"
        )
    scan = scan_folder(folder, legacy=legacy, collect=True)
    _warn_scan(folder, scan, "left out (resume the run to recompute it)")
    rows = []
    for rec in scan.order:
        rows.extend(scan.rows[rec])
    return rows


# ------------------------------------------------------------------------------------- locking


def _holder_info(fd: int) -> dict:
    try:
        raw = os.pread(fd, 4096, 0)
        info = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except (OSError, ValueError, UnicodeDecodeError):
        info = {}
    return info if isinstance(info, dict) else {}


def describe_holder(info: dict) -> str:
    if not info:
        return "another process"
    parts = [f"pid {info.get('pid', '?')}"]
    if info.get("host"):
        parts.append(f"on {info['host']}")
    if info.get("started"):
        parts.append(f"since {info['started']}")
    text = " ".join(parts)
    if info.get("command"):
        text += f" ({info['command']})"
    return text


def _my_info() -> dict:
    cmd = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv or []))
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "command": cmd[:300],
    }


class FolderLock:
    """Exclusive lock on a folder: ``fcntl.flock`` on ``<folder>/.lock``.

    ``flock`` was chosen because the kernel releases it when its holder exits or is killed, so a
    stale lock cannot block a folder and no pid-liveness guessing (wrong across hosts and pid reuse)
    is needed; the holder's pid, host, start time and command are written into the file only to
    name it in the refusal message. The lock file is never deleted (deleting it would let two
    processes lock two different files). On network file systems ``flock`` works where the file
    system forwards locks (NFSv4 does); on systems without ``fcntl`` (Windows) there is no lock and
    a warning says so.
    """

    def __init__(self, folder):
        self.folder = Path(folder)
        self.path = self.folder / LOCK
        self.fd = None
        self.previous = None  # holder info left by a process that did not release the lock

    def acquire(self) -> FolderLock:
        try:
            fd = _os_open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            raise _with_path(exc, self.path) from None
        if fcntl is None:  # pragma: no cover
            _warn(
                f"{self.folder}: this platform has no file locks; make sure no other process "
                f"writes this folder"
            )
            self.fd = fd
            return self
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            info = _holder_info(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise FolderBusy(
                    f"{self.folder} is in use by {describe_holder(info)}; two runs writing one "
                    f"folder would mix their results: wait for it to finish, or use another "
                    f"folder (for parallel runs use --shard i/N with one folder per shard)"
                ) from None
            raise _with_path(exc, self.path) from None
        try:
            previous = _holder_info(fd)
            self.previous = previous if previous.get("pid") else None
            data = json.dumps(_my_info()).encode("utf-8") + b"\n"
            os.ftruncate(fd, 0)
            _write_all(fd, data, self.path)
            checkpoint("lock:acquired")
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # a released lock names nobody
        os.close(fd)  # closing the descriptor releases the flock


def lock_holder(folder) -> dict | None:
    """Who holds the lock of ``folder`` right now (info dict, possibly empty), or None."""
    path = Path(folder) / LOCK
    if fcntl is None or not path.is_file():
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return _holder_info(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------ results folder


def _holds_results(folder: Path) -> str:
    """A short description of the results in a folder, or "" if it holds none."""
    found = []
    for name in (DONE, ROWS):
        p = folder / name
        try:
            if p.is_file() and p.stat().st_size > 0:
                found.append(name)
        except OSError:
            found.append(name)
    return " and ".join(found)


class ResultsFolder:
    """A results folder opened for writing (lock held, identity checked, rows verified).

    Parameters
    ----------
    path : path-like
    kind : str
        What the folder holds (``"study"``); a folder of another kind is refused.
    identity : dict
        Everything that determines a row (see :func:`compare_identity`); recorded when the folder
        is created, compared when it is reopened.
    shard : str
        ``"i/N"``; a folder is reopened only for the same shard.
    expected : int or None
        Number of records this folder should end up with (recorded for merge's completeness check).
    info : dict
        Provenance written into ``config.json`` when the folder is created (never compared).

    Use as a context manager, or call :meth:`open` and :meth:`close`. After :meth:`open`,
    :attr:`done` maps each verified finished record to its done entry; :meth:`append` adds one
    finished record.
    """

    def __init__(
        self,
        path,
        *,
        kind: str,
        identity: dict,
        shard: str = "0/1",
        expected: int | None = None,
        info: dict | None = None,
    ):
        self.path = Path(path)
        self.kind, self.identity, self.shard = kind, identity, shard
        self.expected, self.info = expected, dict(info or {})
        self.done: dict = {}
        self.config: dict | None = None
        self._lock = None
        self._rows_fd = self._done_fd = None
        self._broken = None

    # -- opening
    def open(self) -> ResultsFolder:
        path = self.path
        try:
            path.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise NotADirectoryError(errno.ENOTDIR, "exists and is not a folder", str(path)) from None
        except OSError as exc:
            raise _with_path(exc, path) from None
        self._lock = FolderLock(path).acquire()
        try:
            prev = self._lock.previous
            if prev and prev.get("pid") != os.getpid():
                _warn(
                    f"{path}: the previous run ({describe_holder(prev)}) stopped without "
                    f"finishing; checking its results before resuming"
                )
            _remove_temp_files(path)
            self._config()
            self._verify()
            self._rows_fd = self._open_append(path / ROWS)
            self._done_fd = self._open_append(path / DONE)
            fsync_dir(path)
        except BaseException:
            self.close()
            raise
        return self

    def _config(self) -> None:
        path = self.path
        state, cfg, problem = _load_config(path)
        cfg_path = path / CONFIG
        if state in ("ok", "legacy"):
            if state == "legacy":
                raise StoreError(
                    f"{cfg_path} was written by an older mdsd_ot that did not record which models "
                    f"and prompts made its rows, so resuming could mix results; finish it with "
                    f"that version, or use a new folder"
                )
            results = _holds_results(path)
            if cfg.get("kind") != self.kind:
                if not results:  # e.g. a run that failed before its first record: nothing to keep
                    _warn(
                        f"{path} was set up for a {cfg.get('kind')!r} run that wrote no results; "
                        f"setting it up again for this {self.kind}"
                    )
                    return self._write_config(cfg_path)
                raise StoreError(
                    f"{path} holds a {cfg.get('kind')!r} folder, not a {self.kind!r} folder; use a new folder"
                )
            diffs = []
            if cfg.get("shard") != self.shard:
                diffs.append(f"shard: {self.shard} now, {cfg.get('shard')} before")
            diffs += compare_identity(cfg["identity"], self.identity)
            if diffs and not results:
                # a run that stopped before its first record finished (a mistyped model, a missing
                # dependency) leaves only config.json: nothing can be mixed, so the corrected run
                # takes the folder over instead of being refused
                _warn(
                    f"{path} was set up for another {self.kind} ({'; '.join(diffs)}) but holds no "
                    f"results; setting it up again for this one"
                )
                return self._write_config(cfg_path)
            if diffs:
                raise IdentityMismatch(
                    f"{path} holds results of a different {self.kind}: {'; '.join(diffs)}. "
                    f"Resume it with the values it was made with, or use a new folder"
                )
            self.config = cfg
            if self.expected is not None and cfg.get("expected") != self.expected:
                cfg = dict(cfg, expected=self.expected)
                atomic_write(cfg_path, json.dumps(cfg, indent=1) + "\n", step="config")
                self.config = cfg
            return
        results = _holds_results(path)
        if results:
            what = "no config.json" if state == "missing" else f"its {CONFIG} is {problem}"
            raise StoreError(
                f"{path} holds results ({results}) but {what}, which records the models, prompts "
                f"and parameters that made them, so they cannot be checked; restore {cfg_path} "
                f"from a backup, or move the folder away and start again (nothing was changed)"
            )
        if state == "damaged":
            _warn(f"{cfg_path} was {problem} and the folder holds no results yet; writing it again")
        self._write_config(cfg_path)

    def _write_config(self, cfg_path: Path) -> None:
        """Write a new ``config.json`` recording this folder's kind, identity and shard."""
        cfg = {
            "format": FORMAT,
            "kind": self.kind,
            "identity": self.identity,
            "shard": self.shard,
            "expected": self.expected,
            "created": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            **self.info,
        }
        text = json.dumps(cfg, indent=1, default=_jsonable) + "\n"
        atomic_write(cfg_path, text, step="config")
        self.config = json.loads(text)

    def _verify(self) -> None:
        scan = scan_folder(self.path)
        _warn_scan(self.path, scan, "recomputing it")
        self.done = dict(scan.valid)
        if scan.damaged or scan.stray:
            keep = set(scan.valid)
            src = self.path / ROWS
            with atomic_file(src, step="rewrite-rows") as out:
                try:
                    with open(src, "rb") as fh:
                        for raw in fh:
                            if raw.endswith(b"\n"):
                                row = _parse_row(raw)
                                if row is not None and row["record"] in keep:
                                    out.write(raw)
                except OSError as exc:
                    raise _with_path(exc, src) from None
        if scan.damaged or scan.bad_done:
            text = "".join(_done_line(e) for e in self.done.values())
            atomic_write(self.path / DONE, text, step="rewrite-done")

    def _open_append(self, path: Path) -> int:
        try:
            return _os_open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            raise _with_path(exc, path) from None

    # -- writing
    def append(self, record_id: str, lines) -> None:
        """Add one finished record: its rows (JSON text lines, no newlines), then its done line.

        The rows are written and fsync'd before the done line, which is written in one call and
        fsync'd. After a failed write the folder refuses further appends (reopen it to resume).
        """
        if self._rows_fd is None:
            raise StoreError(f"{self.path} is not open for writing")
        if self._broken:
            raise StoreError(
                f"{self.path}: an earlier write failed ({self._broken}); reopen the folder to resume"
            )
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        entry = {"id": record_id, "rows": len(lines), "sha256": hashlib.sha256(data).hexdigest()}
        done = _done_line(entry).encode("utf-8")
        try:
            checkpoint("rows", fd=self._rows_fd, data=data)
            _write_all(self._rows_fd, data, self.path / ROWS)
            checkpoint("rows:written")
            _fsync(self._rows_fd, self.path / ROWS)
            checkpoint("done", fd=self._done_fd, data=done)
            _write_all(self._done_fd, done, self.path / DONE)
            checkpoint("done:written")
            _fsync(self._done_fd, self.path / DONE)
        except BaseException as exc:
            self._broken = " ".join(str(exc).split()) or type(exc).__name__
            raise
        self.done[record_id] = entry

    # -- closing
    def close(self) -> None:
        for name in ("_rows_fd", "_done_fd"):
            fd = getattr(self, name)
            if fd is not None:
                setattr(self, name, None)
                with contextlib.suppress(OSError):
                    os.close(fd)
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self):
        return self if self._lock is not None else self.open()

    def __exit__(self, *exc):
        self.close()


def _done_line(entry: dict) -> str:
    return (
        json.dumps({"id": entry["id"], "rows": entry["rows"], "sha256": entry["sha256"]}, ensure_ascii=True)
        + "\n"
    )


# --------------------------------------------------------------------------------------- merge


def _missing_shards(labels) -> list[str]:
    by_n, full = {}, False
    for label in labels:
        try:
            i, n = (int(x) for x in str(label).split("/"))
        except ValueError:
            continue
        if n == 1:
            full = True
        by_n.setdefault(n, set()).add(i)
    if full:
        return []
    return [f"{i}/{n}" for n, have in sorted(by_n.items()) for i in range(n) if i not in have]


def _record_digests(folder, records, ignore_fields) -> dict:
    """``{record: sha256}`` of the rows of ``records`` in ``folder`` with the top-level keys
    ``ignore_fields`` removed from every row (canonical JSON, rows in file order): what two runs of
    one record must agree on when those fields (timings) may differ."""
    digests = {}
    path = Path(folder) / ROWS
    try:
        with open(path, "rb") as fh:
            for raw in fh:
                if not raw.endswith(b"\n"):
                    continue
                row = _parse_row(raw)
                if row is None or row["record"] not in records:
                    continue
                kept = {k: v for k, v in row.items() if k not in ignore_fields}
                h = digests.setdefault(row["record"], hashlib.sha256())
                h.update(json.dumps(kept, sort_keys=True, allow_nan=True).encode() + b"\n")
    except OSError as exc:
        raise _with_path(exc, path) from None
    return {rec: h.hexdigest() for rec, h in digests.items()}


def merge_folders(sources, dest, *, kind: str, finalize=None, ignore_fields=()) -> dict:
    """Combine results folders of one identity into ``dest``; returns a small report dict.

    Refuses (``StoreError``) a ``dest`` that is one of the sources or holds results that are not a
    previous merge, and sources of different identities (naming each difference). Warns
    (:class:`StoreWarning`) about shards of a split that are missing, sources with unfinished or
    damaged records (left out), sources still being written, and records present in two sources
    with different rows (the first is kept). ``dest`` is locked while it is written; it is never
    left claiming rows it does not hold: ``done.txt`` is emptied first and written last, and every
    file is replaced atomically. ``finalize(dest)`` (e.g. writing a report) runs before the lock on
    ``dest`` is released.

    ``ignore_fields``: top-level row keys that may differ between two runs of one record without
    a conflict (measured timings: a decoder passes its wall-clock fields). Two copies of a record
    whose rows differ only there are the same record (the first is kept, no warning); a difference
    anywhere else is warned about as before, so a real conflict stands out.
    """
    ignore_fields = frozenset(ignore_fields)
    sources = [Path(s) for s in sources]
    if not sources:
        raise ValueError("give at least one folder to merge")
    dest = Path(dest)
    for s in sources:
        if not s.is_dir():
            raise FileNotFoundError(f"{s} is not a folder")
        if dest.exists() and os.path.samefile(s, dest):
            raise StoreError(
                f"the destination {dest} is also a source ({s}); merging into it "
                f"would overwrite that folder's results: choose a new destination "
                f"folder"
            )
    configs = [read_config(s) for s in sources]
    first = configs[0]
    for s, c in zip(sources, configs):
        if c.get("kind") != kind:
            raise StoreError(f"{s} holds a {c.get('kind')!r} folder, not a {kind!r} folder")
    for s, c in zip(sources[1:], configs[1:]):
        diffs = compare_identity(first["identity"], c["identity"])
        if diffs:
            raise IdentityMismatch(
                f"{s} and {sources[0]} hold different {kind} results ({'; '.join(diffs)}; 'now' "
                f"is {s}); only shards or runs of one {kind} can be merged"
            )
    if dest.exists():
        if not dest.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "exists and is not a folder", str(dest))
        state, old, problem = _load_config(dest)
        if state == "ok" and old.get("shard") != "merged":
            raise StoreError(
                f"{dest} holds the results of a run (shard {old.get('shard')}); "
                f"merging into it would replace them: choose a new destination folder"
            )
        if state != "ok" and _holds_results(dest):
            raise StoreError(
                f"{dest} holds results that are not a merge ({CONFIG} "
                f"{'missing' if state == 'missing' else problem}); choose a new "
                f"destination folder"
            )
    shards = []
    for c in configs:
        for label in c.get("shards") or [c.get("shard")]:
            if label not in shards:
                shards.append(label)
    missing = _missing_shards(shards)
    if missing:
        _warn(
            f"shard(s) {', '.join(missing)} of the split are not among the merged folders; the "
            f"merged results cover part of the records only"
        )
    for s in sources:
        holder = lock_holder(s)
        if holder is not None:
            _warn(
                f"{s} is still being written by {describe_holder(holder)}; merging the records "
                f"finished so far"
            )
    scans, chosen, counts = [], {}, []
    conflicts = []  # (record, first folder, other folder): byte-different copies of one record
    for i, (s, c) in enumerate(zip(sources, configs)):
        scan = scan_folder(s)
        _warn_scan(s, scan, "left out of the merge (resume that run to recompute it)")
        exp = c.get("expected")
        if isinstance(exp, int) and len(scan.valid) < exp:
            _warn(
                f"{s} has {len(scan.valid)} of its {exp} records finished; the others are not in "
                f"the merge (resume that run to finish them)"
            )
        n_new = 0
        for rec, e in scan.valid.items():
            if rec in chosen:
                j, e0 = chosen[rec]
                if e0["sha256"] != e["sha256"]:
                    conflicts.append((rec, j, i))
                continue
            chosen[rec] = (i, e)
            n_new += 1
        counts.append(n_new)
        scans.append(scan)
    if conflicts and ignore_fields:  # each folder read once for all its conflicting records
        wanted = {}
        for rec, j, i in conflicts:
            wanted.setdefault(j, set()).add(rec)
            wanted.setdefault(i, set()).add(rec)
        digests = {k: _record_digests(sources[k], recs, ignore_fields) for k, recs in wanted.items()}
        conflicts = [
            (rec, j, i)
            for rec, j, i in conflicts
            if digests[j].get(rec) is None or digests[j].get(rec) != digests[i].get(rec)
        ]
    for rec, j, i in conflicts:
        _warn(
            f"record {rec!r} has different rows in {sources[j]} and {sources[i]}; keeping those of "
            f"{sources[j]}"
        )
    dest.mkdir(parents=True, exist_ok=True)
    lock = FolderLock(dest).acquire()
    try:
        _remove_temp_files(dest)
        with atomic_file(dest / ROWS, step="merge-rows") as out:
            for i, s in enumerate(sources):
                mine = {rec for rec, (j, _) in chosen.items() if j == i}
                if not mine:
                    continue
                hashes = {rec: hashlib.sha256() for rec in mine}
                try:
                    with open(s / ROWS, "rb") as fh:
                        for raw in fh:
                            if not raw.endswith(b"\n"):
                                continue
                            row = _parse_row(raw)
                            if row is not None and row["record"] in mine:
                                hashes[row["record"]].update(raw)
                                out.write(raw)
                except OSError as exc:
                    raise _with_path(exc, s / ROWS) from None
                changed = [rec for rec in mine if hashes[rec].hexdigest() != chosen[rec][1]["sha256"]]
                if changed:
                    raise StoreError(
                        f"{s} changed while it was being merged (record {changed[0]!r}); run the merge again"
                    )
            # from here on dest never claims rows it does not hold: done.txt first emptied
            atomic_write(dest / DONE, "", step="merge-clear-done")
            cfg = {
                "format": FORMAT,
                "kind": kind,
                "identity": first["identity"],
                "shard": "merged",
                "shards": shards,
                "expected": None,
                "merged_from": [str(s) for s in sources],
                "created": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            }
            for key in ("config", "provenance"):
                if key in first:
                    cfg[key] = first[key]
            atomic_write(dest / CONFIG, json.dumps(cfg, indent=1) + "\n", step="merge-config")
        atomic_write(dest / DONE, "".join(_done_line(e) for _, e in chosen.values()), step="merge-done")
        if finalize is not None:
            finalize(dest)
    finally:
        lock.release()
    return {"records": len(chosen), "per_source": counts, "missing_shards": missing}


# ----------------------------------------------------------------------------- CLI presentation


@contextlib.contextmanager
def one_line_warnings(prefix: str, stream=None):
    """Show :class:`StoreWarning` as ``"<prefix>: warning: <message>"`` (one line each)."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", StoreWarning)
        previous = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, StoreWarning):
                print(
                    f"{prefix}: warning: {' '.join(str(message).split())}",
                    file=stream or sys.stderr,
                    flush=True,
                )
            else:
                previous(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield
