"""Files in and out, safely: every file the tool writes goes through `atomic_write` (a reader
never sees half a file, a planted symlink is never written through), and every input file
through `read_input_bytes`/`read_input_text` (regular files only, bounded in size)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cluster_tool.errors import UsageError

# Files that can hold site data (host names, addresses, findings, rendered configs) are readable
# by their owner only; the folders that hold them likewise.
PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700

MAX_INPUT_ENV = "CLUSTER_TOOL_MAX_INPUT_BYTES"
# The largest capture the tool reads in practice is a fleet's dmesg/Xid log or an
# ibnetdiscover of a few thousand ports: tens of MB. Anything past this is a mistake or an attack.
DEFAULT_MAX_INPUT_BYTES = 64 * 1024 * 1024

_TMP_SUFFIX = ".tmp"


def max_input_bytes() -> int:
    """The size cap on one input file: `$CLUSTER_TOOL_MAX_INPUT_BYTES`, else 64 MiB."""
    given = os.environ.get(MAX_INPUT_ENV, "").strip()
    if not given:
        return DEFAULT_MAX_INPUT_BYTES
    try:
        value = int(given)
    except ValueError:
        raise UsageError(f"{MAX_INPUT_ENV}={given!r}: not a whole number of bytes") from None
    if value < 1:
        raise UsageError(f"{MAX_INPUT_ENV}={given!r}: must be at least 1")
    return value


def read_input_bytes(
    path: Path | str, limit: int | None = None, *, follow_symlinks: bool = True
) -> bytes:
    """The bytes of an input file. UsageError (one line) when it is missing, not a regular file
    (a FIFO would block forever, a device never ends), larger than the cap, or, with
    `follow_symlinks=False` (files the tool wrote itself), a symlink."""
    cap = max_input_bytes() if limit is None else limit
    # O_NONBLOCK: opening a FIFO for reading must not wait for a writer before we can refuse it.
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{path}: not a regular file")
        if info.st_size > cap:
            raise UsageError(
                f"{path}: {info.st_size} bytes, over the input limit of {cap} ({MAX_INPUT_ENV})"
            )
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        size = 0
        # Read no more than the cap even if the file grows while we read it.
        while size <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > cap:
            raise UsageError(f"{path}: over the input limit of {cap} bytes ({MAX_INPUT_ENV})")
        return b"".join(chunks)
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_input_text(path: Path | str, limit: int | None = None) -> str:
    """An input file as UTF-8 text (see `read_input_bytes`); binary content is a one-line
    UsageError naming the first bad byte, never a UnicodeDecodeError."""
    data = read_input_bytes(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def atomic_write(path: Path | str, data: str | bytes, *, mode: int = PRIVATE_FILE) -> Path:
    """Write `data` to `path` so that a reader sees the old file or the new one, never half:
    a temporary file with a random name is created beside it (O_EXCL, O_NOFOLLOW: a planted
    file or symlink is never written through), fsynced, renamed over `path` (which replaces a
    symlink there rather than following it), and the folder fsynced. UsageError on failure."""
    target = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}{_TMP_SUFFIX}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, mode)
    except OSError as exc:
        raise UsageError(f"{target}: cannot write: {exc.strerror or exc}") from None
    try:
        try:
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise UsageError(f"{target}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(target.parent)
    return target


def fsync_dir(folder: Path | str) -> None:
    """Make a rename or a new entry in `folder` durable (best effort: some filesystems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def private_dir(path: Path | str) -> Path:
    """Create `path` (and missing parents) as a folder only its owner can read; refuses a
    symlink where the folder should be."""
    folder = Path(path)
    try:
        # Level by level: `mkdir(parents=True)` would give the parents the umask's mode.
        missing = [p for p in (folder, *folder.parents) if not p.exists()]
        for level in reversed(missing):
            level.mkdir(mode=PRIVATE_DIR, exist_ok=True)
        if folder.is_symlink():
            raise UsageError(f"{folder}: is a symlink; refusing to write through it")
    except OSError as exc:
        raise UsageError(f"{folder}: cannot create: {exc.strerror or exc}") from None
    return folder


def fresh_dir(base: Path | str, stem: str = "") -> Path:
    """A new folder under `base` for one run's job files and outputs: `<stem><UTC time>-<6 hex>`,
    created here and never an existing one. Work folders live on long-kept shared filesystems
    and runs overlap: a name made of the time of day alone comes round again (the next day, or a
    second run in the same second), and a job that never ran would then be read from another
    run's outputs."""
    parent = Path(base)
    try:
        parent.mkdir(parents=True, exist_ok=True)
        while True:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            folder = parent / f"{stem}{stamp}-{secrets.token_hex(3)}"
            try:
                folder.mkdir()
            except FileExistsError:
                continue
            return folder
    except OSError as exc:
        raise UsageError(f"{parent}: cannot create a work folder: {exc.strerror or exc}") from None


def remove_stale(paths: list[Path]) -> None:
    """Remove the files a run is about to have written for it (its jobs' outputs), so that one
    that never gets written reads as missing, never as what an earlier run left there."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


# JSON from a file the tool did not write this run (a run record, a capture manifest, a
# context, a node file, a gate result) is as deep, as large in its numbers and as well formed
# in its text as the tool itself ever writes, or a one-line UsageError.
MAX_JSON_DEPTH = 64
_MAX_JSON_DIGITS = 20


class _JsonRefused(ValueError):
    pass


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_JSON_DIGITS:
        raise _JsonRefused(f"an integer of {len(text)} digits")
    return int(text)


def _json_float(text: str) -> float:
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise _JsonRefused(f"a number past the largest float ({text[:20]})")
    return number


def _json_constant(name: str) -> float:
    raise _JsonRefused(f"{name}, which is not JSON")


def load_json(data: str | bytes, source: object) -> Any:
    """Parse JSON read from `source`; UsageError naming it for text that is not UTF-8 JSON,
    nests deeper than MAX_JSON_DEPTH, holds an integer of more than 20 digits, a number past
    a float (`1e400`), NaN/Infinity, or a lone surrogate (`\\ud800`, which no file can hold
    as UTF-8: a report written from it failed half way)."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UsageError(
                f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None
    try:
        loaded = json.loads(
            data, parse_int=_json_int, parse_float=_json_float, parse_constant=_json_constant
        )
    except RecursionError:
        raise UsageError(f"{source}: JSON nested too deeply") from None
    except _JsonRefused as exc:
        raise UsageError(f"{source}: not a file the tool reads: it holds {exc}") from None
    except json.JSONDecodeError as exc:
        where = f"{source}:{exc.lineno}:{exc.colno}" if isinstance(source, Path) else source
        raise UsageError(f"{where}: not JSON: {exc.msg}") from None
    stack: list[tuple[object, int]] = [(loaded, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise UsageError(f"{source}: JSON nested more than {MAX_JSON_DEPTH} levels")
            items = list(value.items()) if isinstance(value, dict) else [(None, v) for v in value]
            for key, item in items:
                if key is not None:
                    stack.append((key, depth))
                stack.append((item, depth + 1))
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise UsageError(
                    f"{source}: not a file the tool reads: it holds a lone surrogate "
                    f"({value.encode('utf-8', 'backslashreplace')[:40]!r})"
                ) from None
    return loaded
