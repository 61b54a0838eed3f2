"""Round 5: no run writes over a file it did not create, and a full disk loses nothing already written.

- train.py / sft.py write OUT_DIR/config.toml under files.MARK, never over a config.toml without it (the user's);
- eval.py never replaces a file at --out or its samples files (another eval's results, a model's config.json), except
  the samples of a stopped eval by --resume; two evals started on one --out: the second is refused;
- a metrics.jsonl line that cannot be written (a full disk) is cut back off and named (log.LogError), the lines
  before it whole.
Each test failed on the code before (the file replaced, or a raw OSError and a torn line), checked at that commit.
"""
import errno
import json
import os

import pytest

import eval as eval_cli
import sft
import train
from nanogrpo import files, log
from nanogrpo.config import ConfigError

from test_bad_input import small

MINE = "# my own config\nlr = 3e-4\nsteps = 2\n"
ENTRIES = pytest.mark.parametrize("entry", [train.main, sft.main], ids=["train", "sft"])


@ENTRIES
def test_a_config_toml_in_out_dir_that_a_run_did_not_write_is_never_replaced(entry, warm_model_dir, tmp_path):
    mine = tmp_path / "run" / "config.toml"
    mine.parent.mkdir()
    mine.write_text(MINE)
    for argv in ([str(mine), *small(warm_model_dir, mine.parent)], small(warm_model_dir, mine.parent)):
        with pytest.raises(ConfigError, match=r"'out_dir': .*config.toml' is not a file a run wrote"):
            entry(argv)
        assert mine.read_text() == MINE
    assert sorted(p.name for p in mine.parent.iterdir()) == ["config.toml"]


def test_write_owned_refuses_at_the_last_moment_too(tmp_path):
    f = tmp_path / "config.toml"
    files.write_owned(f, "a = 1\n", "a test")
    files.write_owned(f, "a = 2\n", "a test")  # its own: rewritten
    assert f.read_text().splitlines() == [f"{files.MARK}: a test", "a = 2"]
    f.write_text(MINE)
    with pytest.raises(FileExistsError, match="not a file a run wrote"):
        files.write_owned(f, "a = 3\n", "a test")
    assert f.read_text() == MINE


def eval_argv(model, tmp_path, out, *extra):
    task = tmp_path / "sums.jsonl"
    task.write_text("".join(json.dumps({"problem": f"{a}+{b}=", "answer": str(a + b)}) + "\n" for a, b in
                            ((12, 30), (5, 7))))
    return ["--model", str(model), "--tasks", f"sums={task}", "--n", "1", "--max-new-tokens", "2", "--sampler", "torch",
            "--device", "cpu", "--out", str(out), *extra]


def test_eval_never_replaces_a_models_config_json(warm_model_dir, tmp_path, capsys):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(warm_model_dir, model)
    before = (model / "config.json").read_bytes()
    for extra in ([], ["--resume"]):
        with pytest.raises(SystemExit) as e:
            eval_cli.main(eval_argv(model, tmp_path, model / "config.json", *extra))
        assert e.value.code == 2 and "--out" in capsys.readouterr().err
        assert (model / "config.json").read_bytes() == before


def test_a_second_eval_on_one_out_is_refused_and_the_first_results_stay(warm_model_dir, tmp_path, capsys):
    out = tmp_path / "results.json"
    eval_cli.main(eval_argv(warm_model_dir, tmp_path, out))
    first = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(SystemExit) as e:
        eval_cli.main(eval_argv(warm_model_dir, tmp_path, out, "--seed", "1"))
    assert e.value.code == 2 and "already exists, and a run never writes over a file it did not create" in \
        capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == first


def test_evals_started_together_on_one_out_the_second_is_refused_before_generating(warm_model_dir, tmp_path,
                                                                                  monkeypatch):
    from nanogrpo import evaluate as E

    out = tmp_path / "results.json"
    real = E.SampleFile.start

    def racing(self, kept):  # another eval creates the samples file between the checks and the start
        E.samples_path(out).write_text('{"task": "other"}\n')
        return real(self, kept)

    monkeypatch.setattr(E.SampleFile, "start", racing)
    with pytest.raises(SystemExit) as e:
        eval_cli.main(eval_argv(warm_model_dir, tmp_path, out))
    assert e.value.code == 2
    assert E.samples_path(out).read_text() == '{"task": "other"}\n' and not out.exists()


def test_a_full_disk_while_appending_metrics_is_named_and_no_line_is_torn(tmp_path, monkeypatch):
    logger = log.Logger(str(tmp_path), 10)
    logger.log(0, {"reward_mean": 0.5})
    real = os.write
    calls = []

    def full(fd, data):  # the disk fills half-way through the next line
        calls.append(len(data))
        if len(calls) == 1:
            return real(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(log.os, "write", full)
    with pytest.raises(log.LogError, match=r'No space left on device appending to .*metrics.jsonl: .*whole; this '
                                           r'step\'s metrics were not written: \{"step": 2, "reward_mean": 0.25\}'):
        logger.log(1, {"reward_mean": 0.25})
    assert [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == \
        [{"step": 1, "reward_mean": 0.5}]
