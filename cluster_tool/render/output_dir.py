"""The rendered inventory folder, written so that a reader always finds a whole one: the files go
into a private sibling folder, which is exchanged with the old one in one atomic rename, under a
lock on the folder, sweeping what an interrupted render left behind. The folder stays a real
folder at its path (ansible.cfg, `--inventory` and the committed example point at it).

Only what the tool made is read back or replaced: a folder it made (the marker file it writes,
`.cluster-tool-render`, and nothing but the files a render writes) or an empty one; a symlink at
the output path or inside it is refused, never followed."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from cluster_tool.errors import ClusterToolError
from cluster_tool.fileio import PRIVATE_DIR, PRIVATE_FILE, fsync_dir, read_input_bytes

# A second render of the same folder waits this long for the first before giving up.
LOCK_WAIT_S = 120.0

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


class OutputDirError(ClusterToolError):
    """The output folder cannot be read or written safely; nothing was changed."""

    exit_code = 2


# Written into every rendered folder: what makes a folder one render may replace whole.
MARKER = ".cluster-tool-render"
MARKER_TEXT = (
    "This folder is rendered by `cluster-tool render` from a cluster spec; the next render\n"
    "replaces all of it. Edit the spec, not these files.\n"
)
# What a render writes, by folder: a file of any other name is the operator's, and a folder
# holding one is never replaced.
_OWN_FILES = frozenset(
    {MARKER, "hosts.yml", "spec.json", "cabling.csv", "switch-links.csv", "nccl.conf"}
)
_OWN_FOLDERS = {"group_vars": ".yml", "slurm": ".conf", "nccl-tests": ".sbatch"}


def _names(out_dir: Path) -> tuple[str, str]:
    # The prefixes of what a render of `out_dir` may leave beside it when it is killed: the
    # folder being written, and the previous output while two renames swap them.
    base = f".{out_dir.name}."
    return base + "render-", base + "old-"


def check_target(out_dir: Path) -> Path:
    """`out_dir` made absolute without following its last part; OutputDirError when it is the
    root, a symlink, not a folder, or a folder with content that is not a rendered inventory
    (checked before anything walks it: `render -o /` must not read the whole filesystem)."""
    out = Path(os.path.abspath(out_dir))
    if out.parent == out:
        raise OutputDirError(f"{out}: the root cannot be an output folder")
    if out.is_symlink():
        raise OutputDirError(f"{out}: is a symlink; refusing to write or read through it")
    if out.exists():
        if not out.is_dir():
            raise OutputDirError(f"{out}: exists and is not a folder")
        with os.scandir(out) as entries:
            empty = next(entries, None) is None
        if not empty:
            _check_rendered(out)
    return out


def _own_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def looks_rendered(out: Path) -> bool:
    """A folder a render made: its marker, or (rendered before there was one) hosts.yml and
    spec.json."""
    return _own_file(out / MARKER) or all(_own_file(out / n) for n in ("hosts.yml", "spec.json"))


def _foreign(out: Path, limit: int = 4) -> list[str]:
    """Entries of `out` a render does not write (at most `limit`; a foreign folder is not
    walked)."""
    found: list[str] = []
    with os.scandir(out) as entries:
        for entry in entries:
            if len(found) >= limit:
                break
            path = Path(entry.path)
            if entry.name in _OWN_FOLDERS and entry.is_dir(follow_symlinks=False):
                suffix = _OWN_FOLDERS[entry.name]
                with os.scandir(path) as inner:
                    found += [
                        f"{entry.name}/{e.name}"
                        for e in inner
                        if not (e.name.endswith(suffix) and e.is_file(follow_symlinks=False))
                    ]
            elif entry.name not in _OWN_FILES or not _own_file(path):
                found.append(entry.name + ("/" if entry.is_dir(follow_symlinks=False) else ""))
    return found[:limit]


def _check_rendered(out: Path) -> None:
    """OutputDirError unless `out` is a folder a render made, holding only what a render
    writes: replacing it must delete nothing of the operator's."""
    if not looks_rendered(out):
        raise OutputDirError(
            f"{out}: not empty and not made by `cluster-tool render` (no {MARKER}); "
            "refusing to write into it: give an empty or new folder"
        )
    foreign = _foreign(out)
    if foreign:
        raise OutputDirError(
            f"{out}: holds files a render does not write ({', '.join(foreign)}), which "
            "replacing the folder would delete; refusing: move them out first"
        )


def read_rendered(out_dir: Path) -> dict[str, str]:
    """The files of a rendered folder, relative path -> text, read without following any
    symlink (OutputDirError names one if found: `--diff` must not show what it points at)."""
    out = check_target(out_dir)
    if not out.is_dir():
        return {}
    files: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(out):
        filenames = [n for n in filenames if not (dirpath == str(out) and n == MARKER)]
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            if path.is_symlink():
                raise OutputDirError(
                    f"{path}: is a symlink, which render never writes; refusing to read it"
                )
        for name in filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(out))
            files[rel] = read_input_bytes(path, follow_symlinks=False).decode(
                "utf-8", errors="replace"
            )
    return files


@contextlib.contextmanager
def locked(out: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the render lock of `out` for the block: a lock on the folder that holds it (a lock
    file would be left beside the output; renders of one parent are serialised, and take a
    second or two)."""
    try:
        fd = os.open(out.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise OutputDirError(f"{out.parent}: cannot take the render lock: {exc.strerror}") from None
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise OutputDirError(
                        f"{out}: another render has held its lock for {wait_s:.0f} s"
                    ) from None
                time.sleep(0.005)
        yield
    finally:
        os.close(fd)


def sweep(out: Path) -> list[Path]:
    """Remove what interrupted renders of `out` left beside it; call with the lock held."""
    render_prefix, old_prefix = _names(out)
    removed: list[Path] = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(out.parent):
            if not entry.name.startswith((render_prefix, old_prefix)):
                continue
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()
            removed.append(path)
    return removed


def publish(files: Mapping[str, str], out_dir: Path) -> None:
    """Write `files` as the folder `out_dir`: a reader sees the whole old folder or the whole
    new one. A failure leaves the previous output as it was (OutputDirError says so)."""
    out = check_target(out_dir)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputDirError(f"{out}: cannot create the output folder: {exc.strerror}") from None
    with locked(out):
        out = check_target(out)  # what it is now that no other render can change it
        sweep(out)
        try:
            staged = Path(tempfile.mkdtemp(prefix=_names(out)[0], dir=out.parent))
        except OSError as exc:
            raise OutputDirError(f"{out}: cannot create the output folder: {exc}") from None
        try:
            _write_tree(staged, {**files, MARKER: MARKER_TEXT})
            if out.exists():
                _exchange(staged, out)  # `staged` now holds the previous output
                shutil.rmtree(staged, ignore_errors=True)
            else:
                os.rename(staged, out)
            fsync_dir(out.parent)
        except OSError as exc:
            shutil.rmtree(staged, ignore_errors=True)
            raise OutputDirError(f"{out}: render failed, previous output kept: {exc}") from None
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise


def _write_tree(root: Path, files: Mapping[str, str]) -> None:
    folders = {root}
    for rel, content in files.items():
        target = root / rel
        for folder in reversed(target.relative_to(root).parents[:-1]):
            path = root / folder
            if path not in folders:
                path.mkdir(mode=PRIVATE_DIR)
                folders.add(path)
        # The staging folder is new, random and private: nobody else can have planted a link.
        target.write_text(content, encoding="utf-8")
        os.chmod(target, PRIVATE_FILE)
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for folder in folders:
        fsync_dir(folder)


def _exchange(new: Path, old: Path) -> None:
    """Swap two folders in one atomic step (Linux renameat2 RENAME_EXCHANGE); where the kernel
    or filesystem cannot, fall back to two renames, with a moment between them when `old`'s
    path is empty."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is not None:
        if (
            renameat2(_AT_FDCWD, os.fsencode(new), _AT_FDCWD, os.fsencode(old), _RENAME_EXCHANGE)
            == 0
        ):
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
            raise OSError(code, os.strerror(code), str(old))
    aside_dir = Path(tempfile.mkdtemp(prefix=_names(old)[1], dir=old.parent))
    aside = aside_dir / "previous"
    os.rename(old, aside)
    try:
        os.rename(new, old)
    except OSError:
        os.rename(aside, old)
        raise
    os.rename(aside, new)
    aside_dir.rmdir()
