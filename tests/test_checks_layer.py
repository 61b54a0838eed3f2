"""The checks layer's own behaviour (nanogrpo/checks): a start with no signal is said once with its likely cause, a
task's own reward that fails names `task` (not `rewards`), and the checked sampler is the sampler it wraps to
everything but the check."""

import pytest
import torch

from nanogrpo import checks, rewards


class Cfg:
    max_new_tokens, group_size, temperature = 4, 8, 1.0


@pytest.mark.parametrize("metrics,cause", [
    ({"reward_mean": 0.0, "truncated_frac": 0.9}, "max_new_tokens = 4 is too small for the answer format: 90%"),
    ({"reward_mean": 0.0, "truncated_frac": 0.0}, "the task is too hard for the model"),
    ({"reward_mean": 1.0, "truncated_frac": 0.0}, "too easy"),
    ({"reward_mean": 0.5, "truncated_frac": 0.0}, "group_size = 8 is too small"),
])
def test_a_start_with_no_signal_is_said_once_with_its_cause(capsys, metrics, cause):
    for n in range(1, 6):  # said at the third step with no signal, and only then
        checks.no_signal([1.0] * n, metrics, Cfg)
    err = capsys.readouterr().err
    assert err.count("warning: no signal in the first 3 steps") == 1 and cause in err, err


def test_a_start_with_some_signal_says_nothing(capsys):
    checks.no_signal([1.0, 0.5, 1.0], {"reward_mean": 0.0, "truncated_frac": 0.9}, Cfg)
    checks.no_signal([1.0, 1.0], {"reward_mean": 0.0, "truncated_frac": 0.9}, Cfg)
    assert capsys.readouterr().err == ""


def test_a_tasks_own_reward_that_fails_names_task_not_rewards():
    def broken(completions, answer, **_):
        raise KeyError("no_such_field")

    batch = rewards.Batch(["1"], ["1"], [{"problem": "p", "answer": "1"}])
    with pytest.raises(rewards.RewardError, match="^config key 'task': reward 'broken' raised KeyError"):
        rewards.scoring([], [], broken)(batch)
    def odd(completions, **_):
        return ["x"]

    with pytest.raises(rewards.RewardError, match="^config key 'task': reward 'odd' returned 'x'"):
        rewards.scoring([], [], odd)(batch)
    batch = rewards.Batch(["1"], ["1"], [{"problem": "p", "answer": "1"}])
    assert rewards.scoring(["exact"], [], broken)(batch)[0] == [1.0]  # a verifier the list names judges instead


def test_the_reward_call_is_settled_when_scoring_is_built(monkeypatch):
    """TRL's or plain: read from the signature once, when the run's Scoring is built, not at each call."""
    seen = []
    real = rewards.names_prompts
    monkeypatch.setattr(rewards, "names_prompts", lambda fn: seen.append(fn) or real(fn))

    def trl(prompts, completions, **_):
        return [float(p == "q") for p in prompts]

    scoring = rewards.scoring([], [], trl)
    batch = lambda: rewards.Batch(["a", "b"], ["a", "b"], [{"problem": "q"}, {"problem": "r"}])  # noqa: E731
    assert [scoring(batch())[0] for _ in range(3)] == [[1.0, 0.0]] * 3
    assert seen == [trl]


def test_the_checked_sampler_is_the_sampler_it_wraps_to_all_but_the_check():
    """CheckedSampler forwards what it does not check (sleep, wake, close, attributes), and sampler.unwrap sees through
    it and the tool loop alike."""
    from nanogrpo.sampler import unwrap

    class Engine:
        device, slept = "cpu", 0

        def sleep(self):
            self.slept += 1

    class Loop:  # a wrapper as tools.ToolSampler is
        def __init__(self, sampler):
            self.sampler = sampler

    hf = torch.nn.Linear(2, 2)
    engine = Engine()
    checked = checks.CheckedSampler(engine, torch.float32, hf, hf.named_parameters())
    checked.sleep()
    assert not checked.on and checked.device == "cpu" and engine.slept == 1 and checked.take_findings() == []
    assert unwrap(checks.CheckedSampler(Loop(engine), torch.float32, hf, hf.named_parameters())) is engine
