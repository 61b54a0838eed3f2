"""A user's own code, named in the config as `PATH.py:NAME` (`task`, `eval_task`, `rewards`; eval.py's `--tasks`).

The file is imported when the config loads, once per process (again when it changed), as a module of its own; a
file that is missing, does not import or has no NAME is a ConfigError naming the key, before any model is loaded.
It runs with the trainer's rights, as a training script would: it is the user's code, not the model's.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
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
            found.loader.exec_module(module)
        except Exception as e:
            del sys.modules[module_name]
            raise ConfigError(f"config key '{key}': importing {path} failed: {type(e).__name__}: {e}") from e
    if not hasattr(module, name):
        defined = [n for n in vars(module) if not n.startswith("_")]
        raise ConfigError(f"config key '{key}': {path} has no {name!r} (it defines {', '.join(defined) or 'nothing'})")
    return getattr(module, name)
