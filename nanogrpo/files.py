"""The paths an entry point writes: checked before any work, written whole.

Every entry point (train.py, sft.py, eval.py, scripts/generate.py, scripts/decontaminate.py,
scripts/validate_code_data.py) asks `output_problem` about each file it will write before it loads a
model or reads the data, so a bad path costs nothing and an output never replaces an input; then
`atomic_open` writes each file under a temporary name beside it and renames it into place, so a
crash leaves the old file or the new one, never part of one.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


def same_file(a, b) -> bool:
    """Whether two paths name one file (through links too); a path that does not exist yet never does."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def dir_problem(path) -> str:
    """Why files cannot be created in directory `path` (made later if missing), or "" if they can.
    Nothing is created: the nearest existing ancestor is probed with a file that is removed at once."""
    p = Path(path).absolute()
    existing = next(a for a in (p, *p.parents) if a.exists())
    if not existing.is_dir():
        return f"{str(existing)!r} is a file, not a directory"
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".nanogrpo_write_test_")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"cannot write to {str(existing)!r} ({e.strerror or e})"
    return ""


def output_problem(path, inputs=()) -> str:
    """Why `path` cannot take an output file, or "" if it can: it is one of `inputs` (paths the run
    reads), a directory, or somewhere this process cannot create files."""
    for source in inputs:
        if source and same_file(path, source):
            return f"is the input {str(source)!r}: writing it would destroy what is read (choose another path)"
    p = Path(path)
    if p.is_dir():
        return "is a directory"
    if p.exists() and not os.access(p, os.W_OK):
        return "is read-only"
    return dir_problem(p.absolute().parent)


@contextmanager
def atomic_open(path, mode: str = "w", encoding: str = "utf-8"):
    """A file open for writing under a temporary name beside `path`; when the block ends without an
    error it replaces `path` (os.replace), otherwise it is removed and `path` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path, text: str) -> None:
    with atomic_open(path) as f:
        f.write(text)
