"""A user's own code, named in the config as `PATH.py:NAME` (`task`, `eval_task`, `rewards`; eval.py's `--tasks`).

The file is imported when the config loads, once per process (again when it changed), as a module of its own; a
file that is missing, does not import (an exception, a `sys.exit()`, a KeyboardInterrupt it raises: `contained`),
has no NAME, or whose NAME is a class, is a ConfigError naming the key, before any model is loaded.
It runs with the trainer's rights, as a training script would: it is the user's code, not the model's.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import signal
import sys
import threading
import traceback
from pathlib import Path

from nanogrpo import ConfigError


def is_spec(value: str) -> bool:
    """Whether a config value names user code: PATH.py:NAME."""
    path, sep, _ = value.rpartition(":")
    return bool(sep) and path.endswith(".py")


def load(spec: str, key: str):
    """The object NAME of the file PATH for `key = "PATH.py:NAME"`."""
    path, _, name = spec.rpartition(":")
    if not name.isidentifier():
        raise ConfigError(f"config key '{key}': {spec!r}: after {path}: comes a name the file defines, and {name!r} is not one")
    file = Path(path).resolve()
    if not file.is_file():
        where = "" if Path(path).is_absolute() else f" (a relative path is read from the working directory, {Path.cwd()})"
        raise ConfigError(f"config key '{key}': {spec!r} names {path!r}, which is not a file{where}")
    stamp = f"{file}:{file.stat().st_mtime_ns}"  # an edited file is imported again
    module_name = "nanogrpo_user_" + hashlib.sha256(stamp.encode()).hexdigest()[:12]
    module = sys.modules.get(module_name)
    if module is None:
        found = importlib.util.spec_from_file_location(module_name, file)
        module = importlib.util.module_from_spec(found)
        sys.modules[module_name] = module  # dataclasses and pickling look their module up there
        try:
            with contained(f"config key '{key}': importing {path} failed", file=file):
                found.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)  # a file that failed is imported again next time, never half-run
            raise
    if not hasattr(module, name):
        defined = [n for n in vars(module) if not n.startswith("_")]
        raise ConfigError(f"config key '{key}': {path} has no {name!r} (it defines {', '.join(defined) or 'nothing'})")
    obj = getattr(module, name)
    if isinstance(obj, type):  # calling it makes an instance, never rows or a reward's values: named here
        wants = ("a function (completions, **columns) -> values" if key == "rewards" else
                 "a Task, a function rows(split, n, seed), or a list of rows (docs/data.md)")
        raise ConfigError(f"config key '{key}': {spec} is a class (class {obj.__name__}); the config names {wants}, "
                          f"not a class: name an instance of it (for example `{name.lower()} = {obj.__name__}(...)` "
                          "in the file) or a function")
    return obj


@contextlib.contextmanager
def contained(what: str, error: type[Exception] = ConfigError, file: Path | None = None):
    """Runs a user's code (`with contained("config key 'task': importing x.py"):`): whatever it raises or exits with
    (an exception, a `sys.exit()`, which would end the run saying nothing, a KeyboardInterrupt it raises itself) is
    `error` naming `what` and what happened. A Ctrl-C (SIGINT) that really arrives meanwhile still stops the process,
    as anywhere else (`stop_signal`'s signals only note themselves). `file`: the user's file, named in the traceback."""
    received, previous = [], None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        def note(signum, frame):
            received.append(signum)
            signal.default_int_handler(signum, frame)

        previous = signal.signal(signal.SIGINT, note)
    try:
        yield
    except BaseException as e:
        if received and isinstance(e, KeyboardInterrupt):
            raise  # a real Ctrl-C: the user stops the run
        raise error(f"{what}: {happened(e, importing=file is not None)}{_where(e, file)}") from e
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def happened(e: BaseException, importing: bool = False) -> str:
    """What a user's code did, in words (`importing`: while its file was imported)."""
    if isinstance(e, SystemExit):
        return (f"it called sys.exit({e.code!r}) (SystemExit), which would end the run with nothing trained and "
                "nothing said" + ("; a file the config names is imported, not run as a script: put its script part "
                                  "under `if __name__ == \"__main__\":`" if importing else ""))
    if isinstance(e, KeyboardInterrupt):
        return "it raised KeyboardInterrupt (no Ctrl-C arrived: the code raised it itself)"
    try:
        text = str(e)[:300]
    except BaseException:  # noqa: BLE001  an exception whose message itself fails is still named
        text = "(its message could not be shown)"
    return f"{type(e).__name__}: {text}"


def _where(e: BaseException, file: Path | None) -> str:
    """' (FILE line N)': the last line of the user's file in e's traceback, if it is there."""
    if file is None:
        return ""
    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == str(file)]
    return f" ({file.name} line {lines[-1]})" if lines else ""
