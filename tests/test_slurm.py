"""scripts/slurm/*.sbatch under a fake Slurm environment (a fake `scontrol` on PATH, SLURM_* variables):
the dry run prints the srun + torchrun command a real job would run."""

import os
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


@pytest.fixture
def fake_slurm(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "scontrol.log"
    scontrol = bin_dir / "scontrol"
    # expands the node list as the real one does, and records how it was called
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {log}\n'
                        '[ "$1 $2 $3" = "show hostnames gpu-[07-08]" ] && printf "gpu-07\\ngpu-08\\n"\nexit 0\n')
    scontrol.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GPUS_PER_NODE", "MASTER_PORT", "TORCHRUN"))}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", NANOGRPO_DRY_RUN="1", SLURM_JOB_NODELIST="gpu-[07-08]",
               SLURM_JOB_NUM_NODES="2", SLURM_GPUS_ON_NODE="8", SLURM_JOB_ID="4242", SLURM_SUBMIT_DIR=str(ROOT),
               TORCHRUN="torchrun")
    return env, log


def run(script, env, *args):
    return subprocess.run(["bash", str(ROOT / "scripts" / "slurm" / script), *args], env=env, capture_output=True,
                          text=True, cwd="/")


@pytest.mark.parametrize("script,entry", [("train.sbatch", "train.py"), ("sft.sbatch", "sft.py")])
def test_dry_run_prints_the_multi_node_torchrun_command(fake_slurm, script, entry):
    env, log = fake_slurm
    res = run(script, env, "configs/math_qwen2.5_1.5b.toml", "steps=10", "out_dir=runs/a b")
    assert res.returncode == 0, res.stderr
    assert shlex.split(res.stdout) == [
        "srun", "--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
        "torchrun", "--nnodes=2", "--nproc_per_node=8", "--rdzv_id=4242", "--rdzv_backend=c10d",
        "--rdzv_endpoint=gpu-07:29500", entry, "configs/math_qwen2.5_1.5b.toml", "steps=10", "out_dir=runs/a b"]
    assert log.read_text() == "show hostnames gpu-[07-08]\n"


def test_gpus_port_and_nodes_from_other_variables(fake_slurm):
    env, _ = fake_slurm
    del env["SLURM_GPUS_ON_NODE"]
    env.update(SLURM_GPUS_PER_NODE="h100:4", MASTER_PORT="31337", SLURM_JOB_NUM_NODES="3")
    cmd = shlex.split(run("train.sbatch", env).stdout)
    assert "--nproc_per_node=4" in cmd and "--rdzv_endpoint=gpu-07:31337" in cmd and "--nnodes=3" in cmd
    env["GPUS_PER_NODE"] = "2"  # an explicit setting wins
    assert "--nproc_per_node=2" in shlex.split(run("train.sbatch", env).stdout)


def test_outside_slurm_and_bad_gpu_count_are_named_errors(fake_slurm):
    env, _ = fake_slurm
    res = run("train.sbatch", {k: v for k, v in env.items() if k != "SLURM_JOB_NODELIST"})
    assert res.returncode == 2 and "SLURM_JOB_NODELIST is not set" in res.stderr
    res = run("train.sbatch", {**env, "GPUS_PER_NODE": "many"})
    assert res.returncode == 2 and "GPUs per node" in res.stderr


# -- the time limit: save, stop, requeue, resume ------------------------------------------------------
@pytest.mark.parametrize("script", ["train.sbatch", "sft.sbatch"])
def test_sbatch_asks_for_a_signal_before_the_time_limit_and_can_be_requeued(script):
    lines = (ROOT / "scripts" / "slurm" / script).read_text().splitlines()
    for want in ("#SBATCH --signal=B:USR1@300", "#SBATCH --requeue", "#SBATCH --open-mode=append"):
        assert want in lines


def test_a_restarted_job_resumes(fake_slurm):
    env, _ = fake_slurm
    assert "resume=true" not in shlex.split(run("train.sbatch", env, "c.toml").stdout)  # the first start
    cmd = shlex.split(run("train.sbatch", {**env, "SLURM_RESTART_COUNT": "1"}, "c.toml", "steps=5").stdout)
    assert cmd[-3:] == ["c.toml", "steps=5", "resume=true"]  # the last key=value wins


def live(fake_slurm, srun_body: str):
    """The fake environment without the dry run: a fake srun (srun_body) and scancel on PATH."""
    env, log = fake_slurm
    bin_dir = Path(env["PATH"].split(":")[0])
    for name, body in (("srun", srun_body),
                       ("scancel", f'echo "scancel $@" >> {log}\nkill -TERM "$(cat {bin_dir}/srun.pid)"\n')):
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    return {k: v for k, v in env.items() if k != "NANOGRPO_DRY_RUN"}, log, bin_dir


@pytest.mark.parametrize("code,requeued", [(75, True), (3, False), (0, False)])
def test_the_stop_exit_code_requeues_and_others_do_not(fake_slurm, code, requeued):
    env, log, _ = live(fake_slurm, f"exit {code}\n")
    res = run("train.sbatch", env, "c.toml")
    assert res.returncode == (0 if requeued else code), res.stderr
    assert ("requeue 4242" in log.read_text()) == requeued


def test_usr1_before_the_time_limit_stops_the_run_and_requeues(fake_slurm):
    """Slurm's USR1 to the batch script -> SIGTERM to the job's processes (scancel) -> the run ends (here
    as torchrun does after its workers saved and exited 75: with 1) -> the job is requeued."""
    import signal
    import time

    env, log, bin_dir = live(fake_slurm, f'echo $$ > {{bin}}/srun.pid\ntrap \'echo "srun: TERM" >> {{log}}; exit 1\' TERM\n'
                                         'while :; do sleep 0.05; done\n')
    srun = bin_dir / "srun"
    srun.write_text(srun.read_text().replace("{bin}", str(bin_dir)).replace("{log}", str(log)))
    proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "slurm" / "train.sbatch"), "c.toml"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    deadline = time.monotonic() + 30
    while not (bin_dir / "srun.pid").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    calls = log.read_text().splitlines()
    assert calls[1:] == ["scancel --signal=TERM 4242", "srun: TERM", "requeue 4242"], calls
    assert "the time limit is near" in err and "requeueing job 4242" in err
