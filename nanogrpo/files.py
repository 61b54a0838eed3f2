"""The files an entry point reads and writes: JSON read within bounds, outputs checked before any work and
written whole, and never over a file the run did not create.

Every entry point asks `output_problem` about each file it will write before it loads a model or reads the data: a
bad path costs nothing, an output never replaces an input, and a file already there is refused unless the run made
it (a resumed run's own; a `config.toml` carrying `MARK`, the line a run writes first). `atomic_open` writes under a
temporary name and renames, so a crash leaves the old file or the new one, never part of one. Every JSON a user can
hand in is read by `loads`: nesting and integer sizes bounded, a refusal a JSONError (a ValueError) saying why.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shlex
import stat
import sys
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


def output_problem(path, inputs=(), replaces: bool = False) -> str:
    """Why `path` cannot take an output file, or "" if it can: it is one of `inputs` (paths the run
    reads), a directory, a file already there (unless `replaces`: the run made it, e.g. a resumed run's own
    output), or somewhere this process cannot create files."""
    for source in inputs:
        if source and same_file(path, source):
            return f"is the input {str(source)!r}: writing it would destroy what is read (choose another path)"
    p = Path(path)
    if p.is_dir():
        return "is a directory"
    if (p.exists() or p.is_symlink()) and not replaces:
        return ("already exists, and a run never writes over a file it did not create: choose another path, or "
                "move that file away first")
    if p.exists() and not os.access(p, os.W_OK):
        return "is read-only"
    return dir_problem(p.absolute().parent)


def full(e: BaseException) -> bool:
    """An OSError of a full disk or an exceeded quota."""
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def disk_full(e: OSError, path, kept: str = "it is left as it was: written whole or not at all"):
    """The named error of a full disk while writing `path` (log.DiskFullError: exit 1 with the resume command)."""
    return DiskFullError(f"{e.strerror or 'no space left on device'} writing {path}: {kept}")


@contextmanager
def atomic_open(path, mode: str = "w", encoding: str = "utf-8"):
    """A file open for writing under a temporary name beside `path`; when the block ends without an
    error it replaces `path` (os.replace), otherwise it is removed and `path` is left as it was. A full disk is
    named (log.DiskFullError)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if full(e):
            raise disk_full(e, path) from None
        raise


def write_atomic(path, text: str) -> None:
    with atomic_open(path) as f:
        f.write(text)


def write_new(path, text: str) -> None:
    """Write `text` to `path` whole, only if no file is there: FileExistsError otherwise, even when another process
    made it a moment ago (a temporary file hard-linked into place: the link is atomic and never replaces)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.link(tmp, path)
    except OSError as e:
        if full(e):
            raise disk_full(e, path, "it was not written") from None
        raise
    finally:
        tmp.unlink(missing_ok=True)


# ---- files a run owns: the first line says so


MARK = "# written by nanogrpo"  # the first line of a config.toml a run writes; a file without it is the user's


def marked(path) -> bool:
    """Whether `path` is a file whose first line is MARK (a run wrote it, and a run may write it again)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MARK)) == MARK.encode()
    except OSError:
        return False


def owned_problem(path) -> str:
    """Why a run may not (re)write `path` ("" if it may): a file there that a run did not write (no MARK)."""
    p = Path(path)
    if (p.exists() or p.is_symlink()) and not marked(p):
        return (f"{str(p)!r} is not a file a run wrote (its first line is not {MARK!r}): a run never writes over a "
                "file it did not create; move it away, or choose another out_dir")
    return ""


def write_owned(path, text: str, what: str) -> None:
    """Write `text` under MARK (+ `what`: a line saying what the file is) to `path`, whole; refused (FileExistsError)
    when a file there is not one a run wrote (owned_problem: checked before any work, this is the last word)."""
    problem = owned_problem(path)
    if problem:
        raise FileExistsError(problem)
    write_atomic(path, f"{MARK}: {what}\n{text}")


# ---- JSON within bounds


MAX_JSON_DEPTH = 100  # arrays and objects inside each other; deeper data is refused (nothing here nests that far)


class JSONError(ValueError):
    """JSON that is not read: broken, nested deeper than MAX_JSON_DEPTH, or an integer past Python's digit limit."""


def loads(text: str | bytes):
    """`json.loads`, bounded: what Python's reader would turn into a RecursionError (about 1,000 levels) or an
    integer of more digits than `int` converts (4,300), and anything nested deeper than MAX_JSON_DEPTH (code that
    walks the value recursively could not), is a JSONError saying so. NaN and Infinity are read (as Python does:
    metrics.jsonl writes them); refusing them where they are no value is the caller's check."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    try:
        value = json.loads(text)
    except RecursionError:
        raise JSONError(f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects") from None
    except json.JSONDecodeError as e:
        raise JSONError(f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except ValueError as e:  # int(): "Exceeds the limit (4300 digits) for integer string conversion"
        raise JSONError(f"a number too large to read ({str(e).split(':')[0]})") from None
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _depth(value) > MAX_JSON_DEPTH:  # few brackets: shallow
        raise JSONError(f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects")
    return value


def _depth(value) -> int:
    """The nesting depth of a parsed JSON value, without recursion (a stack of (container, depth))."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        x, d = todo.pop()
        if isinstance(x, (list, dict)):
            deepest = max(deepest, d)
            if deepest > MAX_JSON_DEPTH:
                return deepest
            todo += [(v, d + 1) for v in (x.values() if isinstance(x, dict) else x)]
    return deepest


# ---- the run's own files on a full disk: named, with the command that resumes the run (log.py re-exports these)


class LogError(RuntimeError):
    """metrics.jsonl could not be written (a full disk): the message holds the line that was not, and the file keeps
    every line before it whole."""


class DiskFullError(LogError):
    """A file of the run's own (metrics.jsonl, the printed log, config.toml, an evaluation's results and samples)
    could not be written for a full disk or quota: what was written before is whole; the message ends with the
    command that resumes the run once there is space (train.py exits 1 with it, no traceback)."""

    def __init__(self, what: str):
        super().__init__(f"{what}. Free some space, then resume with: {resume_command()}")


def resume_command() -> str:
    """The command this process runs, with the resume flag added (resume=true; eval.py: --resume)."""
    argv = [Path(sys.argv[0]).name if sys.argv and sys.argv[0].endswith(".py") else "train.py", *sys.argv[1:]]
    flag = "--resume" if argv[0] == "eval.py" else "resume=true"
    argv += [] if flag in argv else [flag]
    world = os.environ.get("LOCAL_WORLD_SIZE")
    launcher = ["torchrun", f"--nproc_per_node={world}"] if world else ["python"]
    return " ".join(shlex.quote(a) for a in launcher + argv)


def echo(*args, file=None, **kwargs) -> None:
    """print(*args, flush=True), a full disk named (DiskFullError): a line torn in a log file is cut back off, and
    the stream then points at /dev/null (nothing more is written to it, and the exit's flush cannot fail again)."""
    stream = file if file is not None else sys.stdout
    try:
        fd = stream.fileno()
        size = os.fstat(fd).st_size if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (OSError, ValueError, AttributeError):  # not a file (a test's capture): nothing to cut
        fd = size = None
    try:
        print(*args, file=stream, flush=True, **kwargs)
    except OSError as e:
        if not full(e):
            raise
        name = getattr(stream, "name", "the printed log")
        if fd is not None:
            if size is not None:
                os.ftruncate(fd, size)  # the printed log ends with the line before
                with contextlib.suppress(OSError):
                    name = os.readlink(f"/proc/self/fd/{fd}")  # the file, not "<stdout>"
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
        raise DiskFullError(f"{e.strerror} writing the printed log ({name}): every line before this one is whole; "
                            f"this one was not written: {' '.join(map(str, args))[:200]}") from None
