"""Split placement (`sampler_ranks`, nanogrpo/placement.py) against the colocated run on the same trainer ranks.

A sampler rank samples trainer rank r's steps with r's prompt stream and seeds and the weights the trainers send, so
the run must equal the colocated one bit for bit: every metric but the timings, and the final weights. Under
torchrun on CPU (gloo), one sampler rank beside one or two trainer ranks.
"""

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import train
from nanogrpo import config as C
from test_async import VOLATILE, args, assert_same_weights, metrics, weights

ROOT = Path(train.__file__).parent
pytestmark = pytest.mark.slow  # each test starts torchrun's processes (~10-20 s each on 2 cores)


def launch(ranks: int, out, *extra, entry: str = "train.py") -> subprocess.CompletedProcess:
    """`ranks` processes (1: no torchrun) with the tests' tiny-run settings."""
    cmd = [sys.executable, entry] if ranks == 1 else \
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", entry]
    return subprocess.run([*cmd, *args(*out, *extra)], cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=600)


def assert_same_run(got_dir, want_dir) -> None:
    got, want = metrics(got_dir), {m["step"]: m for m in metrics(want_dir)}
    assert [m["step"] for m in got] == sorted(want)
    for m in got:
        for key, v in m.items():
            if not key.startswith(VOLATILE):
                w = want[m["step"]][key]
                assert v == w or (isinstance(v, float) and math.isnan(v) and math.isnan(w)), (m["step"], key, v, w)
    assert_same_weights(weights(got_dir), weights(want_dir))


@pytest.mark.parametrize("trainers, extra", [
    (1, ()),  # one phase at a time, on two processes
    (1, ("async_steps=1", "tis_cap=2", "dynamic_sampling=true", "eval_every=2", "eval_size=16")),
    (2, ("async_steps=2", "tis_cap=2")),  # one sampler rank for two trainer ranks, two steps ahead
], ids=["sync", "async1-dynamic-evals", "2trainers-async2"])
def test_split_placement_equals_colocated(warm_model_dir, tmp_path, trainers, extra):
    colocated = launch(trainers, (warm_model_dir, tmp_path / "colocated"), *extra)
    assert colocated.returncode == 0, colocated.stderr[-3000:]
    split = launch(trainers + 1, (warm_model_dir, tmp_path / "split"), "sampler_ranks=1", *extra)
    assert split.returncode == 0, split.stderr[-3000:]
    assert_same_run(tmp_path / "split", tmp_path / "colocated")
    if "eval_every=2" in extra:  # evaluated on the sampler rank, logged by the trainer
        assert sum("heldout_accuracy" in m for m in metrics(tmp_path / "split")) == 3  # start, step 2, step 4
        assert "heldout_accuracy_end" in split.stdout
    if "async_steps=1" in extra:
        assert [m["staleness"] for m in metrics(tmp_path / "split") if "staleness" in m] == [0, 1, 1, 1]


def test_the_tool_loop_on_a_sampler_rank_equals_it_colocated(tmp_path):
    """tools = true: the tool loop and its sandbox run on the sampler rank; rollouts, tool metrics and weights are the
    colocated run's (the sandbox's own timings aside)."""
    tool_run = [str(ROOT / "configs" / "multiply_tools.toml"), f"model={ROOT / 'models' / 'tiny-multiply-tools'}",
                "steps=3", "eval_every=0", "save_final=true"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for ranks, out, extra in ((1, "colocated", []), (2, "split", ["sampler_ranks=1"])):
        launcher = [sys.executable] if ranks == 1 else \
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
        done = subprocess.run([*launcher, "train.py", *tool_run, f"out_dir={tmp_path / out}", *extra], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    volatile = (*VOLATILE, "tool_exec_seconds", "sandbox_seconds")
    got, want = metrics(tmp_path / "split"), metrics(tmp_path / "colocated")
    assert [{k: v for k, v in m.items() if not k.startswith(volatile)} for m in got] == \
        [{k: v for k, v in m.items() if not k.startswith(volatile)} for m in want]
    assert sum(m["tool_calls_mean"] for m in got) > 0, got[0]  # the tool ran
    assert_same_weights(weights(tmp_path / "split"), weights(tmp_path / "colocated"))


def test_split_resume_with_rollouts_in_flight_continues_exactly(warm_model_dir, tmp_path):
    """The checkpoint of step 2 holds step 3's rollouts and the stream's place, both made on the sampler rank; a
    resumed split run trains them first and goes on as the uninterrupted run."""
    extra = ("sampler_ranks=1", "async_steps=1", "tis_cap=2", "save_every=2", "keep_checkpoints=4")
    full = launch(2, (warm_model_dir, tmp_path / "full"), *extra)
    assert full.returncode == 0, full.stderr[-3000:]
    cut = tmp_path / "cut"
    shutil.copytree(tmp_path / "full" / "checkpoints" / "step_000002", cut / "checkpoints" / "step_000002")
    again = launch(2, (warm_model_dir, cut), *extra, "resume=true")
    assert again.returncode == 0, again.stderr[-3000:]
    assert [m["step"] for m in metrics(cut)] == [3, 4]
    want = {m["step"]: m for m in metrics(tmp_path / "full")}
    for m in metrics(cut):
        assert {k: v for k, v in m.items() if not k.startswith(VOLATILE)} == \
            {k: v for k, v in want[m["step"]].items() if not k.startswith(VOLATILE)}
    assert_same_weights(weights(cut), weights(tmp_path / "full"))


STALE_SAMPLER = """
import os, runpy, sys
sys.path.insert(0, os.getcwd())  # the repository: this file is not in it
from nanogrpo.torch_sampler import TorchSampler
TorchSampler.sync_weights = lambda self, weights: [None for _ in weights]  # takes the weights, keeps none
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")
"""


def test_a_stale_sampler_rank_stops_the_trainers_named(warm_model_dir, tmp_path):
    """The sampler rank checks what it holds against the fingerprints the trainer sent; the trainers rule on it."""
    entry = tmp_path / "stale.py"
    entry.write_text(STALE_SAMPLER)
    done = launch(2, (warm_model_dir, tmp_path / "run"), "sampler_ranks=1", entry=str(entry))
    assert done.returncode != 0
    # step 1 samples with what the sampler loaded (the same bytes): the first sync it ignores shows at step 2
    assert "step 2: the sampler did not generate with the trainer's weights" in done.stderr
    assert "STALE WEIGHTS" in done.stderr
    assert len(metrics(tmp_path / "run")) == 1  # step 1 only: nothing was trained on the stale rollouts


@pytest.mark.parametrize("bad, message", [
    (["sampler_ranks=1", "sampler=vllm"], "needs sampler=torch"),
    (["sampler_ranks=1", "exact_logprobs=true"], "exact_logprobs = false"),
    (["sampler_ranks=-1"], "sampler_ranks"),
])
def test_bad_split_settings_are_named_before_compute(bad, message):
    with pytest.raises(C.ConfigError, match=message):
        C.load(bad)


def test_split_placement_needs_more_ranks_than_samplers(warm_model_dir, tmp_path):
    alone = launch(1, (warm_model_dir, tmp_path / "alone"), "sampler_ranks=1")
    assert alone.returncode != 0 and "sampler_ranks=1 needs a torchrun with more ranks" in alone.stderr


def test_a_stop_signal_to_the_trainer_saves_stops_the_sampler_rank_and_resumes_exactly(tmp_path):
    """SIGTERM to the trainer rank: it stops after that step, saves the step sampled ahead, and tells the sampler rank to
    stop (no hang); a resume continues as the uninterrupted split run."""
    import re

    from test_faults import GRPO, assert_same_metrics, rank_pid, signal_after_step

    from test_faults import metrics as all_metrics

    split = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py", *GRPO,
             "sampler_ranks=1", "async_steps=1", "tis_cap=2", "prompts_per_step=4"]
    cut, full = tmp_path / "cut", tmp_path / "full"
    rc, out = signal_after_step([*split, f"out_dir={cut}", "steps=1000"], 3, target=lambda agent: rank_pid(agent, 0))
    s = len(all_metrics(cut))
    assert f"stopped by SIGTERM after step {s}/1000" in out, out[-3000:]
    # torchrun reports the trainer's 75, and -15 for the sampler rank when it stopped it after the trainer exited
    codes = re.findall(r"exitcode\s*: (-?\d+)", out)
    assert rc != 0 and "75" in codes and set(codes) <= {"75", "-15"}, out[-3000:]
    assert not re.search(r"\[rank\d\]: Traceback", out), out[-3000:]  # neither rank raised (torchrun's own report aside)
    ckpt = cut / "checkpoints" / f"step_{s:06d}"
    from nanogrpo import checkpoint

    saved = checkpoint.rank_state(ckpt)
    # 0-based steps s and s + 1: sampled with versions s - 1 and s (as a colocated async_steps = 1 checkpoint holds)
    assert [(b.step, b.version) for b in saved["rollouts"]] == [(s, s - 1), (s + 1, s)]
    assert saved["data"]["consumed"] == 4 * (s + 2)  # the stream on the sampler rank, after them
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for out_dir, extra in ((cut, ["resume=true"]), (full, [])):
        done = subprocess.run([*split, f"out_dir={out_dir}", f"steps={s + 2}", *extra], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    assert_same_metrics(all_metrics(cut), all_metrics(full))
