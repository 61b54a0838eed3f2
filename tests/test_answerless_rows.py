"""A task's own rows without an `answer`, judged by a verifier that compares with it (exact, number, math: named in
`rewards`, or the task's own reward), stop the run as the rows load, naming the task and the row (exit 2, before
the model), not after ALL_NONE_STEPS steps of every reward None . Rows judged as a dataset's (by_row)
may go without one: they have no verdict (docs/data.md)."""

import runpy
import sys
from pathlib import Path

import pytest

import train
from nanogrpo import data, rewards, tasks

ROOT = Path(__file__).resolve().parent.parent

USER = '''
from nanogrpo import rewards
from nanogrpo.tasks import Task


def rows(split, n, seed):  # no answer at all
    return [{"problem": f"{i}+1=", "target": i + 1} for i in range(n)]


def some(split, n, seed):  # row 2 has none, row 3 an empty one
    out = [{"problem": f"{i}+1=", "answer": str(i + 1)} for i in range(n)]
    del out[2]["answer"]
    out[3]["answer"] = " "
    return out


def listed(split, n, seed):  # a list is no gold
    return [{"problem": "1+1=", "answer": ["2"]}] * n


def brevity(completions, **columns):
    return [1.0 - len(c) / 10 for c in completions]


exact_task = Task(some, rewards.exact, "raw")  # its own reward is a verifier
'''


@pytest.fixture
def user(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(USER)
    return path


CASES = {  # config -> what the error says
    "task={f}:rows rewards=exact": r"{f}:rows train row 0 has no 'answer', and the exact verdict compares",
    "task={f}:rows rewards=number": r"{f}:rows train row 0 has no 'answer', and the number verdict",
    "task={f}:rows rewards=math": r"{f}:rows train row 0 has no 'answer', and the math verdict",
    "task={f}:some rewards=math,{f}:brevity": r"{f}:some train row 2 has no 'answer', and the math verdict",
    "task={f}:exact_task": r"{f}:exact_task train row 2 has no 'answer', and the exact verdict",
    "task={f}:listed rewards=exact": r"{f}:listed train row 0 'answer': a gold is text or a finite number, not list",
    "task=arithmetic eval_task={f}:rows rewards=exact": r"{f}:rows test row 0 has no 'answer', and the exact verdict",
}


@pytest.mark.parametrize("case", list(CASES))
def test_rows_without_an_answer_for_a_verifier_are_named_as_they_load(case, user, tmp_path):
    args = [a.format(f=user) for a in case.split()]
    with pytest.raises(data.DataError, match="^" + CASES[case].format(f=user).replace(".", r"\.")):
        train.main([f"model={tmp_path}/no-model", f"out_dir={tmp_path}/out", *args])


def test_the_run_stops_with_exit_2_and_one_error_line_before_anything_is_written(user, tmp_path, capsys):
    """As train.py runs: exit 2 (was: three steps of all-None rewards, then the stop), nothing in out_dir."""
    old, sys.argv = sys.argv, ["train.py", f"task={user}:some", "rewards=exact", f"model={tmp_path}/no-model",
                               f"out_dir={tmp_path}/out"]
    try:
        with pytest.raises(SystemExit) as e:
            runpy.run_path(str(ROOT / "train.py"), run_name="__main__")
    finally:
        sys.argv = old
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {user}:some train row 2 has no 'answer'")
    assert not (tmp_path / "out").exists()


def test_rows_judged_as_a_datasets_may_go_without_an_answer(user):
    """by_row (no verifier named, the task no reward of its own): such a row has no verdict, and loads; and a task
    whose own reward reads other fields is not asked for an answer."""
    got = tasks.load_rows(f"{user}:rows", "auto", n=3, gold_check=rewards.GOLD_CHECKS[rewards.by_row])
    assert [r["target"] for r in got] == [1, 2, 3]
    assert tasks.answer_verifier(tasks.get(f"{user}:rows"), "auto", rewards.GOLD_CHECKS[rewards.by_row]) == ""
    assert tasks.answer_verifier(tasks.Task(None, lambda c, **_: [0.0] * len(c)), "math", None) == ""
    assert tasks.answer_verifier(tasks.get(f"{user}:exact_task"), "math", None) == "exact"
    assert tasks.answer_verifier(tasks.get(f"{user}:rows"), "code", None) == ""
    assert tasks.answer_verifier(tasks.get(f"{user}:rows"), None, None) == ""  # no verdict said (scripts/decontaminate.py)
    assert len(tasks.load_rows(f"{user}:rows", n=2)) == 2
    assert len(tasks.load_rows(f"{user}:rows", "math", n=2)) == 2  # scripts/generate.py: no verdict said either
    with pytest.raises(data.DataError, match="row 0 has no 'answer', and the exact verdict"):  # train.py's, for exact
        tasks.load_rows(f"{user}:rows", "math", n=2, gold_check=None)
