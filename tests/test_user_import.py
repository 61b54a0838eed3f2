"""A user's file that exits, raises or is interrupted at import (`task`, `eval_task`, `rewards` = PATH.py:NAME; eval.py's
--tasks) stops train.py and eval.py with exit 2 and one `error:` line naming the file and what happened, before any
compute and with nothing written; a NAME that is a class is named as such (nanogrpo/usercode.py `contained`)."""

import os
import re
import runpy
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import eval  # noqa: F401  (imported once, at collection: each run_path below re-runs only the script's own lines)
import train  # noqa: F401
from nanogrpo import config as C
from nanogrpo import tasks, usercode

ROOT = Path(__file__).resolve().parent.parent

GOOD = "def rows(split, n, seed):\n    return [{'problem': '1+1=', 'answer': '2'}] * n\n\n" \
       "def brevity(completions, **columns):\n    return [0.0 for _ in completions]\n\n"
AT_IMPORT = {  # what the file does at import -> what the error says of it (after "importing FILE failed: ")
    "import sys\nsys.exit(0)": r"it called sys.exit\(0\) \(SystemExit\), .*nothing trained.*__main__",
    "import sys\nsys.exit(3)": r"it called sys.exit\(3\) \(SystemExit\)",
    "exit()": r"it called sys.exit\(None\) \(SystemExit\)",
    "raise SystemExit('bye')": r"it called sys.exit\('bye'\) \(SystemExit\)",
    "raise KeyboardInterrupt": r"it raised KeyboardInterrupt \(no Ctrl-C arrived",
    "raise RuntimeError('no GPU here')": r"RuntimeError: no GPU here",
    "import no_such_module_anywhere": r"ModuleNotFoundError: No module named 'no_such_module_anywhere'",
    "class Odd(BaseException):\n    def __str__(self):\n        raise TypeError\nraise Odd()": r"Odd: \(its message could not be shown\)",
}
CLASSY = GOOD + "class Countdown:\n    def __init__(self, split, n, seed):\n        self.rows = []\n\n" \
                "class Reward:\n    def __call__(self, completions, **columns):\n        return [0.0] * len(completions)\n"


def as_script(script: str, argv: list[str], capsys) -> tuple[int, list[str]]:
    """`python SCRIPT ARGV` run in this process as its `__main__` (the exit code mapping of train.py / eval.py):
    the exit code and the lines of stderr."""
    old = sys.argv
    sys.argv = [script, *argv]
    try:
        with pytest.raises(SystemExit) as e:
            runpy.run_path(str(ROOT / script), run_name="__main__")
    finally:
        sys.argv = old
    return e.value.code, capsys.readouterr().err.strip().splitlines()


def user_file(tmp_path, body: str, name: str = "mine.py") -> Path:
    path = tmp_path / name
    path.write_text(body + "\n" + GOOD)
    return path


@pytest.mark.parametrize("body", list(AT_IMPORT))
@pytest.mark.parametrize("key", ["task", "eval_task", "rewards"])
def test_a_file_that_exits_or_raises_at_import_stops_train_with_exit_2(body, key, tmp_path, capsys):
    """sys.exit(0) at import ended train.py with exit 0, nothing said; KeyboardInterrupt in a traceback."""
    path = user_file(tmp_path, body)
    arg = {"task": f"task={path}:rows", "eval_task": f"eval_task={path}:rows", "rewards": f"rewards=accuracy,{path}:brevity"}[key]
    code, err = as_script("train.py", [arg, f"model={tmp_path}/no-model", f"out_dir={tmp_path}/out"], capsys)
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith(f"error: config key '{key}': importing {path} failed: "), err
    assert re.search(AT_IMPORT[body] + r".* \(mine.py line [1-4]\)$", err[0]), err  # the line that did it
    assert not (tmp_path / "out").exists()  # before any compute: nothing written
    assert not [m for m in sys.modules if m.startswith("nanogrpo_user_") and getattr(sys.modules[m], "__file__", "")
                == str(path)]  # not left half-imported: the next load imports it again


@pytest.mark.parametrize("body", ["import sys\nsys.exit(0)", "raise KeyboardInterrupt"])
def test_a_file_that_exits_at_import_stops_eval_with_exit_2(body, tmp_path, capsys):
    path = user_file(tmp_path, body)
    code, err = as_script("eval.py", ["--model", f"{tmp_path}/no-model", "--tasks", f"{path}:rows",
                                      "--out", f"{tmp_path}/r.json"], capsys)
    assert code == 2
    assert err[-1].startswith(f"eval.py: error: --tasks: importing {path} failed: it "), err
    assert not (tmp_path / "r.json").exists()


def test_the_file_is_imported_again_after_it_failed(tmp_path):
    """A failed import leaves no half-run module behind: fixed, the same file loads."""
    path = tmp_path / "mine.py"
    path.write_text("import sys\nsys.exit(0)\n" + GOOD)
    with pytest.raises(C.ConfigError, match="sys.exit"):
        usercode.load(f"{path}:rows", "task")
    stamp = path.stat().st_mtime_ns
    path.write_text(GOOD)
    os.utime(path, ns=(stamp, stamp))  # the same stamp: the same module name as the failed import's
    assert usercode.load(f"{path}:rows", "task")("train", 2, 0) == [{"problem": "1+1=", "answer": "2"}] * 2


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals reach the main thread")
def test_a_real_ctrl_c_during_import_still_stops(tmp_path):
    """The signal the run answers is not swallowed: a SIGINT that really arrives while the file imports is the
    KeyboardInterrupt that stops the process, not a config error."""
    path = tmp_path / "slow.py"
    path.write_text("import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(2)\n" + GOOD)
    # Python's own handler, as in a foreground `python train.py` (a background job of a shell starts with SIGINT ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            usercode.load(f"{path}:rows", "task")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the run's handler is back
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("arg,what", [
    ("task={f}:Countdown", "config key 'task': .*:Countdown is a class \\(class Countdown\\); the config names a Task"),
    ("eval_task={f}:Countdown", "config key 'eval_task': .*:Countdown is a class"),
    ("rewards=accuracy,{f}:Reward", "config key 'rewards': .*:Reward is a class \\(class Reward\\); the config names a "
                                    "function .*`reward = Reward\\(...\\)`"),
])
def test_a_name_that_is_a_class_is_named_at_load(arg, what, tmp_path, capsys):
    """A class passed `callable`: as a task it became a rows function returning an instance (named as rows that are
    not a list), as a reward a TypeError traceback after the first generate."""
    path = tmp_path / "classy.py"
    path.write_text(CLASSY)
    code, err = as_script("train.py", [arg.format(f=path), f"model={tmp_path}/no-model", f"out_dir={tmp_path}/out"],
                          capsys)
    assert code == 2 and len(err) == 1 and re.match("error: " + what, err[0]), err
    assert not (tmp_path / "out").exists()


def test_a_rows_function_that_exits_is_named(tmp_path):
    """A user's rows(split, n, seed), or a function returning the rows, that calls sys.exit: named, not exit 0."""
    path = tmp_path / "exits.py"
    path.write_text("import sys\n\ndef rows(split, n, seed):\n    sys.exit(0)\n\ndef some():\n    raise KeyboardInterrupt\n")
    with pytest.raises(C.ConfigError, match=r"config key 'task': .*exits.py:some\(\): it raised KeyboardInterrupt"):
        tasks.get(f"{path}:some")
    with pytest.raises(tasks.data.DataError, match=r"exits.py:rows: its rows\('train', 4, 0\): it called sys.exit\(0\)"):
        tasks.load_rows(f"{path}:rows", n=4)


def test_a_rows_function_that_exits_stops_eval_with_exit_2(tmp_path, capsys):
    """eval.py --tasks PATH.py:NAME calls the task's rows(split, n, seed) itself: a sys.exit(0) there is named too."""
    path = tmp_path / "quits.py"
    path.write_text("import sys\nfrom nanogrpo.tasks import Task\n\ndef rows(split, n, seed):\n    sys.exit(0)\n\n"
                    "task = Task(rows, lambda completions, **kw: [0.0] * len(completions))\n")
    code, err = as_script("eval.py", ["--model", str(ROOT / "models" / "tiny-arithmetic"), "--tasks", f"{path}:task",
                                      "--out", f"{tmp_path}/r.json"], capsys)
    assert code == 2 and "its rows(...): it called sys.exit(0)" in err[-1], err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
def test_a_file_that_exits_at_import_stops_train_from_the_command_line(tmp_path):
    """As a user runs it: exit 2 (was 0), one error line, out_dir not made."""
    path = tmp_path / "mine.py"
    path.write_text("import sys\nsys.exit(0)\n" + GOOD)
    got = subprocess.run([sys.executable, "train.py", f"task={path}:rows", f"model={tmp_path}/no-model",
                          f"out_dir={tmp_path}/out"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    err = got.stderr.strip().splitlines()
    assert got.returncode == 2 and len(err) == 1, got.stderr
    assert err[0].startswith(f"error: config key 'task': importing {path} failed: it called sys.exit(0)")
    assert not (tmp_path / "out").exists()
