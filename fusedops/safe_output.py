"""Safe output files for every command that writes (export, fuse, demo --out-dir, bench --out-dir).

Rules (each violation is one OutputFileError line naming the path and the problem):
- an absent path is created; an existing *regular file* is replaced only with ``force``; a symbolic link (dangling
  or not) is replaced only with ``force``, and then the link itself is replaced, never its target;
- a directory, device node, FIFO or socket is never replaced, ``force`` or not; nor is an input of the command
  (same file, hard links included);
- the folder must exist and be writable, and the file name must fit the file system's NAME_MAX. The temporary
  file is named independently of the output (``.fusedops-XXXXXXXX.tmp``), so a long but legal output name works;
- writes are atomic: data goes to the temporary file in the output's folder, is flushed to disk, then renamed over
  the output (without ``force`` by a hard link that fails if something appeared meanwhile). A failed write (disk
  full, file size limit, I/O error) removes the temporary file and leaves the output as it was.

``PendingOutput`` validates and creates the temporary file when opened, so a command checks its output before its
long work (export's minutes of tracing) and writes at the end. ``write_bytes`` does both at once; ``prepare_dir``
validates a folder and the files a command will write into it.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterable

from .catalog import quote
from .errors import OutputFileError

_KIND = {stat.S_IFDIR: "a directory", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket"}
_TMP_PREFIX, _TMP_SUFFIX = ".fusedops-", ".tmp"


def _q(path) -> str:
    return quote(os.fsdecode(path), limit=200)


def _kind(mode: int) -> str:
    return "a file" if stat.S_ISREG(mode) else _KIND.get(stat.S_IFMT(mode), "not a regular file")


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _describe_os_error(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "no space left on the device"
    if e.errno == errno.EFBIG:
        return "the file size limit was exceeded"
    if e.errno == errno.EDQUOT:
        return "the disk quota is exceeded"
    if e.errno == errno.EROFS:
        return "the file system is read-only"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return e.strerror or type(e).__name__


def _same_file(st: os.stat_result, inputs: Iterable) -> bool:
    for p in inputs:
        try:
            ist = os.stat(p)
        except (OSError, ValueError):
            continue
        if (ist.st_dev, ist.st_ino) == (st.st_dev, st.st_ino):
            return True
    return False


def check_output_path(path, force: bool = False, inputs: Iterable = (), what: str = "output") -> Path:
    """The output path after the rules of the module doc (nothing is created); OutputFileError naming the problem.
    ``inputs``: files the command reads, never to be replaced."""
    if path is None or not isinstance(path, (str, os.PathLike)) or str(path).strip() == "":
        raise OutputFileError(f"{what} path is empty")
    text = os.fspath(path)
    if "\x00" in str(text):
        raise OutputFileError(f"{what} path {_q(text)} contains a NUL character")
    dst = Path(text).expanduser()
    if dst.name in ("", ".", "..") or str(text).endswith(os.sep):
        raise OutputFileError(f"{what} path {_q(text)} names a folder, not a file")
    folder = dst.parent
    try:
        fst = os.stat(folder)
    except FileNotFoundError:
        raise OutputFileError(f"{what} folder {_q(folder)} does not exist") from None
    except NotADirectoryError:
        raise OutputFileError(f"{what} path {_q(text)}: a parent of it is a file, not a folder") from None
    except OSError as e:
        raise OutputFileError(f"{what} folder {_q(folder)} cannot be used: {_describe_os_error(e)}") from None
    if not stat.S_ISDIR(fst.st_mode):
        raise OutputFileError(f"{what} folder {_q(folder)} is {_kind(fst.st_mode)}, not a folder")
    name_len, name_max = len(os.fsencode(dst.name)), _name_max(folder)
    if name_len > name_max:
        raise OutputFileError(f"{what} file name {_q(dst.name)} is {name_len} bytes long; the file system allows "
                              f"at most {name_max}")
    try:
        st = os.lstat(dst)
    except FileNotFoundError:
        return dst
    except OSError as e:
        raise OutputFileError(f"{what} {_q(text)} cannot be inspected: {_describe_os_error(e)}") from None
    kind = stat.S_IFMT(st.st_mode)
    if kind == stat.S_IFLNK:
        target = os.readlink(dst)
        dangling = not os.path.exists(dst)
        if not force:
            raise OutputFileError(f"{what} {_q(text)} is a symbolic link{' (dangling)' if dangling else ''} to "
                                  f"{_q(target)}; pass --force (force=True) to replace the link (its target is "
                                  f"left alone)")
        return dst
    if kind != stat.S_IFREG:
        raise OutputFileError(f"{what} {_q(text)} is {_kind(st.st_mode)}; refusing to replace it")
    if _same_file(st, inputs):
        raise OutputFileError(f"{what} {_q(text)} is the input file; refusing to overwrite the input")
    if not force:
        raise OutputFileError(f"{what} {_q(text)} exists; pass --force (force=True) to replace it")
    return dst


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class PendingOutput:
    """An output validated and reserved now (temporary file created in its folder), written by ``commit``.
    Use as a context manager: leaving without commit removes the temporary file and touches nothing else."""

    def __init__(self, path, force: bool = False, inputs: Iterable = (), what: str = "output"):
        self.inputs = list(inputs)
        self.force, self.what = force, what
        self.path = check_output_path(path, force, self.inputs, what)
        try:
            fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX, dir=self.path.parent)
        except OSError as e:
            raise OutputFileError(f"cannot create {what} {_q(self.path)}: {_describe_os_error(e)} in folder "
                                  f"{_q(self.path.parent)}") from None
        self._fd, self._tmp = fd, tmp

    def __enter__(self) -> "PendingOutput":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()

    def discard(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._tmp is not None:
            try:
                os.unlink(self._tmp)
            except FileNotFoundError:
                pass
            self._tmp = None

    def commit(self, data: bytes) -> Path:
        """Write ``data`` and put it in place atomically; OutputFileError (and nothing changed) on failure."""
        if self._tmp is None:
            raise RuntimeError("PendingOutput.commit called twice or after discard")
        try:
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            os.fsync(self._fd)
            os.fchmod(self._fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        except OSError as e:
            self.discard()
            raise OutputFileError(f"cannot write {self.what} {_q(self.path)}: {_describe_os_error(e)} (wrote "
                                  f"nothing; {len(data)} bytes were to be written)") from None
        os.close(self._fd)
        self._fd = None
        return self._recheck_and_place()

    def commit_file(self, write) -> Path:
        """Like ``commit``, for a writer that needs a file name (e.g. ``onnx_ir.save``): ``write(tmp_path)`` fills the
        reserved temporary file, which is then put in place atomically. OSError while writing becomes
        OutputFileError (and nothing changed)."""
        if self._tmp is None:
            raise RuntimeError("PendingOutput.commit_file called twice or after discard")
        os.close(self._fd)
        self._fd = None
        try:
            write(Path(self._tmp))
            os.chmod(self._tmp, 0o666 & ~_umask())
        except OSError as e:
            self.discard()
            raise OutputFileError(f"cannot write {self.what} {_q(self.path)}: {_describe_os_error(e)}") from None
        except BaseException:
            self.discard()
            raise
        return self._recheck_and_place()

    def _recheck_and_place(self) -> Path:
        """Put the written temporary file in place, checking the path again first: it may have changed during the
        command's long work. Anything failing discards the temporary file."""
        try:
            check_output_path(self.path, self.force, self.inputs, self.what)
            self._place()
        except BaseException:
            self.discard()
            raise
        self._tmp = None
        return self.path

    def _place(self) -> None:
        try:
            if self.force:
                os.replace(self._tmp, self.path)  # replaces a link itself, never its target
                return
            try:
                os.link(self._tmp, self.path)  # fails if the output appeared meanwhile
            except FileExistsError:
                raise OutputFileError(f"{self.what} {_q(self.path)} appeared while this command ran; pass --force "
                                      f"(force=True) to replace it") from None
            except OSError as e:
                if e.errno not in (errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise
                os.replace(self._tmp, self.path)  # no hard links on this file system; checked just above
                return
            os.unlink(self._tmp)
        except OSError as e:
            raise OutputFileError(f"cannot write {self.what} {_q(self.path)}: {_describe_os_error(e)}") from None


def write_bytes(path, data: bytes, force: bool = False, inputs: Iterable = (), what: str = "output") -> Path:
    """Validate, write atomically, return the path (see the module doc)."""
    with PendingOutput(path, force, inputs, what) as out:
        return out.commit(data)


def prepare_dir(folder, names: Iterable[str], force: bool = False, what: str = "output folder") -> Path:
    """Create ``folder`` if absent (with its parents) and check that each of ``names`` may be written into it; a
    folder that exists as a file, device or dangling link is refused. Returns the folder."""
    if folder is None or str(folder).strip() == "":
        raise OutputFileError(f"{what} path is empty")
    path = Path(os.fspath(folder)).expanduser()
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise OutputFileError(f"{what} {_q(path)} is a dangling symbolic link") from None
        try:
            path.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise OutputFileError(f"{what} {_q(path)}: a parent of it is a file, not a folder") from None
        except OSError as e:
            raise OutputFileError(f"cannot create {what} {_q(path)}: {_describe_os_error(e)}") from None
        st = os.stat(path)
    except NotADirectoryError:
        raise OutputFileError(f"{what} {_q(path)}: a parent of it is a file, not a folder") from None
    except OSError as e:
        raise OutputFileError(f"{what} {_q(path)} cannot be used: {_describe_os_error(e)}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise OutputFileError(f"{what} {_q(path)} is {_kind(st.st_mode)}, not a folder")
    for name in names:
        check_output_path(path / name, force)
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutputFileError(f"{what} {_q(path)} is not writable")
    return path
