"""The changes users make most, from their own files and no library file edited (docs/architecture.md "Where a
change goes"): a task of one's own that carries its reward (Countdown), and a reward of one's own weighted into the
list, both named in the config as PATH.py:NAME; a name that does not resolve is an error before any compute."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

import eval as eval_cli
import train
from nanogrpo import config as C
from nanogrpo import rewards, tasks, usercode

ROOT = Path(__file__).resolve().parent.parent

# A user's file: Countdown (make the target from the numbers, each once, with + - * and parentheses), its reward
# the expression's value, not the number written (the number verifier would pay "22" and refuse "3*5+7").
COUNTDOWN = '''
import ast
import random

from nanogrpo.tasks import Task

CALLS = []  # (completions, verdicts) of every call: the test reads what the trainer was paid


def rows(split, n, seed):
    rng = random.Random(f"countdown-{split}-{seed}")
    out = []
    for _ in range(n):
        a, b, c = rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 9)
        out.append({"problem": f"{a} {b} {c}=", "numbers": [a, b, c], "target": a * b + c})
    return out


def value(text, numbers):
    """The value of an expression that uses each of the numbers once, else None."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError):
        return None
    ok = (ast.Expression, ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.Constant)
    if len(text) > 64 or not all(isinstance(n, ok) for n in ast.walk(tree)):
        return None
    used = sorted(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant))
    return eval(compile(tree, "<countdown>", "eval")) if used == sorted(numbers) else None


def reward(completions, numbers, target, **_):
    got = [float(value(c, n) == t) for c, n, t in zip(completions, numbers, target)]
    CALLS.append((list(completions), got))
    return got


countdown = Task(rows, reward, "raw")
'''

BREVITY = '''
def brevity(completions, **columns):
    """Shorter is better: 1 - characters / 10, in TRL's reward signature."""
    assert "target" in columns and "numbers" in columns  # the rows' fields, each a list
    return [1.0 - len(c) / 10 for c in completions]


def not_a_function():
    return 3


def broken(completions, **columns):
    return [len(c) / columns["no_such_field"][0] for c in completions]


def trl_prompts(prompts, completions, **kwargs):  # a reward ported from TRL: `prompts` are the rows' problems
    return [float(c in p) for p, c in zip(prompts, completions)]


def trl_ids(completions, completion_ids, **kwargs):  # TRL's completion_ids: not passed
    return [0.0 for _ in completions]


def misspelt(completions, targt, **kwargs):  # the rows' field is `target`
    return [0.0 for _ in completions]


def _rows(split, n, seed):
    return [{"problem": "1 2 3=", "numbers": [1, 2, 3], "target": 5}] * n


from nanogrpo.tasks import Task  # noqa: E402

misspelt_task = Task(_rows, misspelt, "raw")  # a task whose own reward names a field its rows do not have
'''

IMPORTING = '''
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from my_rewards import _rows, misspelt  # a plain import: the reward's module is not one usercode loaded
from nanogrpo.tasks import Task

task = Task(_rows, misspelt, "raw")
'''


def small(model, out, *extra):
    return [f"model={model}", f"out_dir={out}", "prompts_per_step=4", "group_size=2", "eval_every=0",
            "micro_batch_size=8", "max_new_tokens=4", "steps=2", "save_final=false", *extra]


@pytest.fixture
def user_files(tmp_path):
    (tmp_path / "countdown.py").write_text(COUNTDOWN)
    (tmp_path / "my_rewards.py").write_text(BREVITY)
    (tmp_path / "importing.py").write_text(IMPORTING)
    return tmp_path / "countdown.py", tmp_path / "my_rewards.py"


def test_the_task_pays_by_its_own_reward_not_a_number(user_files):
    """The verdict is the task's own: "3*5+7" is right for 3 5 7 -> 22, "22" (the number alone) is not."""
    task = tasks.get(f"{user_files[0]}:countdown")
    row = {"problem": "3 5 7=", "numbers": [3, 5, 7], "target": 22}
    assert rewards.judge(task.reward, ["3*5+7", "22", "3*5+8", "3*5*7"], [row] * 4) == [1.0, 0.0, 0.0, 0.0]


def test_a_user_reward_that_raises_is_named_not_a_traceback(user_files):
    """A user's reward or task reward that raises is a RewardError naming it (train.py: exit 2 before the update)."""
    row = {"problem": "3 5 7=", "numbers": [3, 5, 7], "target": 22}
    batch = rewards.Batch(["3*5+7"], ["3*5+7"], [row])
    with pytest.raises(rewards.RewardError, match="reward 'broken' raised KeyError: 'no_such_field'"):
        rewards.scoring(["accuracy", f"{user_files[1]}:broken"], [], tasks.get(f"{user_files[0]}:countdown").reward)(batch)
    with pytest.raises(rewards.RewardError, match="reward 'broken' raised KeyError"):
        rewards.judge(usercode.load(f"{user_files[1]}:broken", "test"), ["3*5+7"], [row])


@pytest.mark.slow
def test_a_task_and_a_reward_from_user_files_train_two_steps(tiny_model_dir, user_files, tmp_path):
    task, mine = (f"{f}:{name}" for f, name in zip(user_files, ("countdown", "brevity")))
    out = tmp_path / "out"
    res = train.main(small(tiny_model_dir, out, f"task={task}", f"rewards=accuracy,{mine}", "reward_weights=1,0.5",
                           "eval_every=2", "eval_size=3"))
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "reward_mean" in m]
    assert len(steps) == 2
    calls = usercode.load(f"{user_files[0]}:CALLS", "test")  # the module the trainer imported
    # each step's accuracy is the task's reward on its 8 completions (the held-out evaluations, 3 each, called it too)
    per_step = [got for _, got in calls if len(got) == 8]
    assert [sum(g) / 8 for g in per_step[:2]] == [m["accuracy"] for m in steps]
    for m in steps:
        assert -1.0 < m["reward/brevity"] <= 1.0
        assert m["reward_mean"] == pytest.approx(m["reward/accuracy"] + 0.5 * m["reward/brevity"])
    assert 0.0 <= res["heldout_accuracy_end"] <= 1.0  # its own held-out split, scored by its own reward
    assert 'template = "raw"' in (out / "config.toml").read_text()  # "" became the task's own


@pytest.mark.slow
def test_a_task_without_a_verdict_has_no_heldout_accuracy(tiny_model_dir, tmp_path):
    """Rows without an answer have no verdict: training goes by the user's reward, and the held-out accuracy is
    undefined (NaN), never 0.000."""
    (tmp_path / "plain.py").write_text("def rows(split, n, seed):\n"
                                       "    return [{'problem': f'{i}+1='} for i in range(n)]\n")
    (tmp_path / "my_rewards.py").write_text(BREVITY.replace('assert "target" in columns and "numbers" in columns', ""))
    res = train.main(small(tiny_model_dir, tmp_path / "out", f"task={tmp_path}/plain.py:rows",
                           f"rewards={tmp_path}/my_rewards.py:brevity", "eval_every=2", "eval_size=4"))
    assert math.isnan(res["heldout_accuracy_start"]) and math.isnan(res["heldout_accuracy_end"])
    lines = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert all(m["none_frac"] == 0.0 for m in lines if "none_frac" in m)  # the reward list paid every completion


def test_eval_takes_a_task_of_ones_own(tiny_model_dir, user_files, tmp_path):
    out = tmp_path / "results.json"
    res = eval_cli.main(["--model", tiny_model_dir, "--tasks", f"{user_files[0]}:countdown", "--n", "2", "--limit", "3",
                         "--max-new-tokens", "4", "--sampler", "torch", "--device", "cpu", "--out", str(out)])
    assert res["tasks"]["countdown"]["problems"] == 3
    records = [json.loads(x) for x in (tmp_path / "results.samples.jsonl").read_text().splitlines()]
    task = tasks.get(f"{user_files[0]}:countdown")
    for r in records:  # each verdict is the task's own reward on that completion
        row = task.rows("test", 3, 0)[r["index"]]
        assert r["reward"] == task.reward([r["completion"]], numbers=[row["numbers"]], target=[row["target"]])[0]


BAD = {  # what the config names -> what the error says
    "task={d}/missing.py:countdown": "config key 'task': .*missing.py.*not a file",
    "task=missing.py:countdown": "config key 'task': .*not a file \\(a relative path is read from the working directory",
    "task={d}/countdown.py:countdwn": "config key 'task': .*countdown.py has no 'countdwn'",
    "task=arithmetc": "config key 'task': unknown task 'arithmetc' \\(did you mean 'arithmetic'\\?\\)",
    "task={d}/countdown.py": "config key 'task': .*countdown.py' is a Python file: name .*countdown.py:NAME",
    "rewards=accuracy,{d}/my_rewards.py:brevty": "config key 'rewards': .*my_rewards.py has no 'brevty'",
    "rewards=accuracy,{d}/nowhere.py:brevity": "config key 'rewards': .*nowhere.py.*not a file",
    "rewards=acuracy": "config key 'rewards': unknown reward 'acuracy' \\(did you mean 'accuracy'\\?\\); known: accuracy, ",
    "rewards=accuracy,think_fromat": "unknown reward 'think_fromat' \\(did you mean 'think_format'\\?\\); known: ",
    "rewards=zzqqxx": "unknown reward 'zzqqxx'; known: accuracy, exact",  # nothing near: no guess
    "rewards=accuracy,{d}/my_rewards.py": "config key 'rewards': .*my_rewards.py' is a Python file: name .*my_rewards.py:FN",
    "eval_task={d}/countdown.py:nope": "config key 'eval_task': .*has no 'nope'",
    "task={d}/countdown.py:Task.rows": "config key 'task': .*countdown.py:Task.rows': after .* 'Task.rows' is not one",
    "rewards=accuracy,{d}/my_rewards.py:": "config key 'rewards': .*after .*my_rewards.py: comes a name the file defines",
}


@pytest.mark.parametrize("arg", list(BAD))
def test_a_name_that_does_not_resolve_is_an_error_at_load(arg, user_files, tmp_path):
    with pytest.raises(C.ConfigError, match=BAD[arg]):
        C.load([arg.format(d=tmp_path)])


@pytest.mark.slow
def test_a_misnamed_file_stops_train_with_exit_2_before_any_model(user_files, tmp_path):
    """From the command line: exit 2 with the error named, before the (missing) model is loaded or anything
    written (eval.py's: the test below, in this process, through the same argparse exit)."""
    got = subprocess.run([sys.executable, "train.py", f"task={tmp_path}/countdown.py:countdwn",
                          f"model={tmp_path}/no-model", f"out_dir={tmp_path}/out"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert got.returncode == 2 and "error: config key 'task'" in got.stderr and "countdwn" in got.stderr
    assert not (tmp_path / "out").exists()


CALL_BAD = {  # a user reward whose parameters the rows' columns cannot fill -> what the error says
    "rewards=accuracy,{d}/my_rewards.py:trl_ids": "config key 'rewards': reward 'trl_ids' cannot be called as "
                                                  "FN\\(completions, \\*\\*columns\\) with the task's columns \\(problem, "
                                                  "numbers, target\\): missing a required argument: 'completion_ids'",
    "rewards=accuracy,{d}/my_rewards.py:misspelt": "config key 'rewards': reward 'misspelt' .*missing a required argument: 'targt'",
    "task={d}/my_rewards.py:misspelt_task": "config key 'task': reward 'misspelt' .*missing a required argument: 'targt'",
    "task={d}/importing.py:task": "config key 'task': reward 'misspelt' .*missing a required argument: 'targt'",
}


@pytest.mark.parametrize("arg", list(CALL_BAD))
def test_a_user_reward_that_the_rows_cannot_call_is_named_before_the_model(arg, user_files, tmp_path):
    """TypeError at the first scoring, after a generate, before; now a named error as the rows load, before the model
    (model= names none)."""
    extra = [arg.format(d=tmp_path)] + (["task=" + f"{tmp_path}/countdown.py:countdown"] if arg.startswith("rewards") else [])
    with pytest.raises(rewards.RewardError, match=CALL_BAD[arg]):
        train.main([f"model={tmp_path}/no-model", f"out_dir={tmp_path}/out", *extra])


def test_a_reward_ported_from_trl_gets_the_rows_problems_as_prompts(user_files):
    """TRL's reward_funcs name `prompts`: they get each row's problem (the statement shown to the model), and the
    load-time check lets them through; a column of the rows called `prompts` comes first."""
    rows = [{"problem": "3 5 7=", "numbers": [3, 5, 7], "target": 22}, {"problem": "1 2=", "numbers": [1, 2], "target": 3}]
    fn = rewards.term(f"{user_files[1]}:trl_prompts")
    rewards.check_user_calls([f"{user_files[1]}:trl_prompts"], rewards.exact, rows)  # no error
    assert fn(rewards.Batch(["5 7", "5 7"], ["5 7", "5 7"], rows)) == [1.0, 0.0]
    own = [{**r, "prompts": "1 2="} for r in rows]
    assert fn(rewards.Batch(["5 7", "5 7"], ["5 7", "5 7"], own)) == [0.0, 0.0]


def test_eval_names_a_user_task_whose_reward_the_rows_cannot_call(user_files, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        eval_cli.main(["--model", f"{tmp_path}/no-model", "--tasks", f"{tmp_path}/my_rewards.py:misspelt_task",
                       "--out", f"{tmp_path}/r.json"])
    assert e.value.code == 2
    assert re.search("--tasks: .*reward 'misspelt' .*missing a required argument: 'targt'", capsys.readouterr().err)


EVAL_BAD = {  # eval.py --tasks ... -> what the error says (the model named does not exist: the task is checked first)
    "{d}/missing.py:countdown": "--tasks: .*missing.py.*not a file",
    "{d}/countdown.py:countdwn": "--tasks: .*countdown.py has no 'countdwn'",
    "{d}/countdown.py": "--tasks: .*countdown.py' is a Python file: name .*countdown.py:NAME",
    "{d}/my_rewards.py:not_a_function": "--tasks: .*not_a_function is not a Task",
    "gsm8k,gsm8kk": "--tasks: unknown eval task 'gsm8kk'",
}


@pytest.mark.parametrize("spec", list(EVAL_BAD))
def test_eval_names_a_task_that_does_not_resolve_before_the_model(spec, user_files, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        eval_cli.main(["--model", f"{tmp_path}/no-model", "--tasks", spec.format(d=tmp_path),
                       "--out", f"{tmp_path}/r.json"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert re.search("error: " + EVAL_BAD[spec], err), err
    assert not (tmp_path / "r.json").exists()
