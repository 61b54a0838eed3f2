"""Round 6: a full disk on the run's own files (metrics.jsonl, the printed log, config.toml, an evaluation's results)
is a named error (log.DiskFullError, a LogError: train.py exits 1 with one `error:` line) that ends with the command
resuming the run, never a traceback; nothing written before it is torn.

Each failed on the code before: the printed log and config.toml raised a bare OSError (a traceback), and a
metrics.jsonl that could not be opened too; no message said how to resume.
"""
import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.tmpfs import tmpfs
from nanogrpo import files, log

ROOT = Path(__file__).resolve().parent.parent
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture(autouse=True)
def not_under_torchrun(monkeypatch):
    """The resume command names torchrun when LOCAL_WORLD_SIZE is set, as torchrun sets it; an earlier test of the same
    worker can leave it set (in-process launches), so each test here starts without it."""
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)


def enospc(*a, **k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_the_resume_command_is_the_command_run_with_resume(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(sys, "argv", ["train.py", "my run.toml", "steps=5"])
    assert log.resume_command() == "python train.py 'my run.toml' steps=5 resume=true"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(sys, "argv", ["/x/sft.py", "c.toml", "resume=true"])
    assert log.resume_command() == "torchrun --nproc_per_node=2 sft.py c.toml resume=true"


def test_metrics_that_cannot_be_opened_on_a_full_disk_are_named_with_the_resume_command(tmp_path, monkeypatch):
    logger = log.Logger(str(tmp_path), 10)
    logger.log(0, {"reward_mean": 0.5})
    monkeypatch.setattr(sys, "argv", ["train.py", "c.toml"])
    monkeypatch.setattr(log.os, "open", enospc)  # not even the open succeeds
    with pytest.raises(log.DiskFullError, match=r"No space left on device appending to .*metrics.jsonl: .* whole; .*"
                                                 r"Free some space, then resume with: python train.py c.toml "
                                                 r"resume=true$"):
        logger.log(1, {"reward_mean": 0.25})
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1, "reward_mean": 0.5}\n'


class FillingLog:
    """A log file (stdout redirected to it) on a disk that fills: once `full`, half of a write lands, then ENOSPC."""

    def __init__(self, path):
        self.fd, self.name, self.full = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), str(path), False

    def fileno(self):
        return self.fd

    def write(self, text):
        data = text.encode()
        if self.full:
            os.write(self.fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return os.write(self.fd, data)

    def flush(self):
        pass


def test_a_full_disk_under_the_printed_log_is_named_and_the_torn_line_cut_off(tmp_path, monkeypatch):
    path = tmp_path / "train.log"
    stream = FillingLog(path)
    monkeypatch.setattr(sys, "argv", ["train.py", "c.toml"])
    log.echo("step 1/9 | reward 0.500", file=stream)
    stream.full = True
    with pytest.raises(log.DiskFullError, match=r"No space left on device writing the printed log \(.*train.log\): "
                                                r"every line before this one is whole; this one was not written: "
                                                r"step 2/9 \| reward 0.250. Free some space, then resume with: "):
        log.echo("step 2/9 | reward 0.250", file=stream)
    assert path.read_text() == "step 1/9 | reward 0.500\n"  # the half line is gone
    os.write(stream.fd, b"more")  # the stream now writes to /dev/null: nothing after the error lands
    assert path.read_text() == "step 1/9 | reward 0.500\n"
    os.close(stream.fd)


def test_a_full_disk_writing_a_file_whole_is_named_and_the_old_file_stays(tmp_path, monkeypatch):
    f = tmp_path / "config.toml"
    files.write_owned(f, "a = 1\n", "a test")
    before = f.read_text()
    real = files.os.replace
    monkeypatch.setattr(files.os, "replace", enospc)
    with pytest.raises(log.DiskFullError, match=r"config.toml: it is left as it was: written whole or not at all"):
        files.write_owned(f, "a = 2\n", "a test")
    monkeypatch.setattr(files.os, "replace", real)
    assert f.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["config.toml"]  # no temporary left
    monkeypatch.setattr(files.os, "link", enospc)
    with pytest.raises(log.DiskFullError, match=r"new.json: it was not written"):
        files.write_new(tmp_path / "new.json", "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


# -- end to end, on a real full disk (a tmpfs: root only) ------------------------------------------------------
@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs, or a skip where mounting is not permitted."""
    with tmpfs(tmp_path / "disk", "1m") as d:
        yield d


def fill(disk: Path, left: int) -> None:
    (disk / "filler").write_bytes(b"x" * max(0, shutil.disk_usage(disk).free - left))


def whole_lines(path: Path) -> list:
    text = path.read_text() if path.exists() else ""
    assert text == "" or text.endswith("\n"), f"{path} ends in a torn line: {text[-200:]!r}"
    return text.splitlines()


@pytest.mark.slow
@pytest.mark.parametrize("full", ["metrics", "log"], ids=["metrics.jsonl", "printed log"])
def test_a_real_full_disk_exits_1_with_the_resume_command(tiny_disk, tmp_path, full):
    """metrics.jsonl: out_dir on the full disk (config.toml fits, then the metrics lines fill it); the printed log:
    train.py's stdout redirected to a file there (out_dir elsewhere), a line every step."""
    out = tiny_disk / "out" if full == "metrics" else tmp_path / "out"
    fill(tiny_disk, 24 * 1024 if full == "metrics" else 8 * 1024)
    args = [f"out_dir={out}", "prompts_per_step=4", "group_size=2", "eval_every=0", "max_new_tokens=2",
            "micro_batch_size=8", "steps=400", "save_final=false", "log_every=1"]
    logfile = tiny_disk / "train.log"
    with open(logfile if full == "log" else os.devnull, "w") as stdout:
        res = subprocess.run([sys.executable, "train.py", *args], cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE,
                             text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "Exception ignored" not in res.stderr, res.stderr[-3000:]  # the exit's flush of stdout did not fail again
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: No space left on device ") and last.endswith(
        f"Free some space, then resume with: python train.py {' '.join(args)} resume=true"), last
    assert ("appending to" if full == "metrics" else f"writing the printed log ({logfile})") in last
    steps = [json.loads(x)["step"] for x in whole_lines(out / "metrics.jsonl")]
    assert steps == list(range(1, len(steps) + 1)) and steps
    if full == "log":
        assert whole_lines(logfile)[-1].startswith(f"step {len(steps) - 1}/400 |")  # the last whole line


def test_a_full_disk_under_an_evals_samples_keeps_whole_calls_and_is_named(tmp_path, monkeypatch):
    """evaluate.SampleFile.append (eval.py's and the run's in-run benchmarks' samples): a write the disk cuts short is
    cut back off, so the file holds the earlier calls whole and --resume reads them; named (DiskFullError)."""
    from nanogrpo import evaluate
    from nanogrpo.log import DiskFullError

    samples = evaluate.SampleFile(tmp_path / "r.json", {"model": "m"}, False, 0, 1)
    samples.start([])
    samples.append([{"task": "t", "index": 0}])
    before = samples.part.read_text()
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data[:7])) if len(data) > 7 else enospc())
    with pytest.raises(DiskFullError, match="r.*samples of every call before this one are kept whole"):
        samples.append([{"task": "t", "index": 1, "completion": "x" * 100}])
    monkeypatch.setattr(os, "write", real)
    assert samples.part.read_text() == before and before.endswith("\n")
