"""Bad input gets a named error before any compute, and nothing already written is lost."""
import dataclasses
import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
import torch

import eval as eval_cli
import sft
import train
from nanogrpo import data, rollout
from nanogrpo import model as M
from nanogrpo.config import FIELDS, Config, ConfigError, load


def small(model, out_dir, *extra):
    return [f"model={model}", f"out_dir={out_dir}", "prompts_per_step=4", "group_size=2", "eval_every=0",
            "micro_batch_size=8", "max_new_tokens=2", *extra]


# -- config: every numeric knob's range, named --------------------------------------------------
@pytest.mark.parametrize("arg", ["lr=-1", "lr=nan", "lr=inf", "log_every=0", "eval_every=-1", "save_every=-1",
                                 "clip_low=2", "grad_clip=-1", "min_lr_ratio=5", "beta=-1", "warmup_steps=-5",
                                 "top_p=nan"])
def test_numeric_knob_out_of_range_is_named(arg):
    with pytest.raises(ConfigError, match=f"'{arg.split('=')[0]}'"):
        load([arg])


@pytest.mark.parametrize("key", [k for k, f in FIELDS.items() if f.type == "float"])
def test_every_float_knob_refuses_nan_and_inf(key):
    for bad in ("nan", "inf", "-inf"):
        with pytest.raises(ConfigError, match=f"'{key}'"):
            load([f"{key}={bad}"])


def test_defaults_are_in_range():
    assert load([]) == Config()


@pytest.mark.skipif(torch.cuda.is_available(), reason="has a GPU")
def test_cuda_without_a_gpu_fails_at_config_load():
    with pytest.raises(ConfigError, match="'device'"):
        load(["device=cuda"])


# -- files: named errors, with the line or the file -----------------------------------------------
def test_utf16_jsonl_names_file_and_line(tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_text('{"problem": "1+1", "answer": "2"}\n', encoding="utf-16")
    with pytest.raises(data.DataError, match=r"rows.jsonl:1: not UTF-8"):
        data.load_rows(str(f), "math")


def test_binary_jsonl_names_file_and_line(tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_bytes(b'{"problem": "1+1", "answer": "2"}\n\x89PNG\r\n\x1a\n\x00\xff\xfe\n')
    with pytest.raises(data.DataError, match=r"rows.jsonl:2: not UTF-8"):
        data.load_rows(str(f), "math")


@pytest.fixture
def model_copy(tiny_model_dir, tmp_path):
    dst = tmp_path / "model"
    shutil.copytree(tiny_model_dir, dst)
    return dst


def test_broken_config_json_is_named(model_copy, tmp_path):
    (model_copy / "config.json").write_text('{"architectures": ["Qwen2ForCausalLM"], ')
    with pytest.raises(M.ModelError, match="config.json"):
        train.main(small(model_copy, tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_truncated_safetensors_is_named(model_copy):
    f = model_copy / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(M.ModelError, match="model.safetensors is truncated"):
        M.load_tokenizer(str(model_copy))


def test_corrupt_safetensors_is_named(model_copy):
    (model_copy / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!" + b"\0" * 64)
    with pytest.raises(M.ModelError, match="not a valid safetensors"):
        M.load_model(str(model_copy))


def test_missing_tokenizer_files_are_named(model_copy, tmp_path, capsys):
    for name in M.TOKENIZER_FILES + ("tokenizer_config.json", "merges.txt", "special_tokens_map.json"):
        (model_copy / name).unlink(missing_ok=True)
    with pytest.raises(M.ModelError, match="no tokenizer files"):
        train.main(small(model_copy, tmp_path / "out"))
    with pytest.raises(SystemExit):
        eval_cli.main(["--model", str(model_copy), "--tasks", "gsm8k", "--out", str(tmp_path / "results.json")])
    assert "no tokenizer files" in capsys.readouterr().err


# -- train.py: rows the reward cannot score, out_dir, resume -----------------------------------------
def test_code_reward_on_the_arithmetic_task_fails_before_compute(tiny_model_dir, tmp_path):
    with pytest.raises(ConfigError, match="rewards names code.*built-in task without tests"):
        train.main(small(tiny_model_dir, tmp_path / "out", "rewards=code"))
    assert not (tmp_path / "out").exists()


def test_code_reward_on_rows_without_tests_names_the_row(tiny_model_dir, tmp_path):
    f = tmp_path / "math.jsonl"
    f.write_text('{"problem": "1+1", "answer": "2"}\n')
    with pytest.raises(data.DataError, match=r"math.jsonl:1: .*'tests'"):
        train.main(small(tiny_model_dir, tmp_path / "out", "rewards=code", f"task={f}"))


@pytest.mark.slow
def test_a_run_without_any_reward_stops_naming_the_reward(tiny_model_dir, tmp_path, monkeypatch):
    def no_rewards(completions, rows, *rest):
        return [None] * len(completions), {}, [None] * len(completions)

    monkeypatch.setattr(rollout, "score_rollouts", no_rewards)
    with pytest.raises(ConfigError, match=r"None for 3 steps in a row \(verifier exact\).*Likely cause"):
        train.main(small(tiny_model_dir, tmp_path / "out", "steps=20"))
    assert len((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()) == 3


ENTRIES = pytest.mark.parametrize("entry", [train.main, sft.main], ids=["train", "sft"])  # one check, both


@ENTRIES
def test_out_dir_that_is_a_file_is_named(entry, tiny_model_dir, tmp_path):
    (tmp_path / "f").write_text("x")
    for out in (tmp_path / "f", tmp_path / "f" / "sub"):
        with pytest.raises(ConfigError, match="'out_dir'.*not a directory"):
            entry(small(tiny_model_dir, out))


@ENTRIES
def test_read_only_out_dir_is_named(entry, tiny_model_dir):
    with pytest.raises(ConfigError, match="'out_dir': cannot write"):  # /proc/self: read-only even for root
        entry(small(tiny_model_dir, "/proc/self/nanogrpo-run"))


@ENTRIES
def test_resume_without_a_checkpoint_refuses_and_keeps_the_metrics(entry, tiny_model_dir, tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward_mean": 0.5}\n')
    with pytest.raises(ConfigError, match="no complete checkpoint"):
        entry(small(tiny_model_dir, tmp_path, "resume=true"))
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1, "reward_mean": 0.5}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


@pytest.mark.slow
def test_torn_last_metrics_line_is_dropped_on_resume(tiny_model_dir, tmp_path, capsys):
    train.main(small(tiny_model_dir, tmp_path, "steps=2"))
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "reward_me')  # a crash mid-write
    train.main(small(tiny_model_dir, tmp_path, "steps=3", "resume=true"))
    steps = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]
    assert "dropping an unreadable line" in capsys.readouterr().out


# -- eval.py ----------------------------------------------------------------------------------
@pytest.fixture
def math_file(tmp_path):
    f = tmp_path / "tiny.jsonl"
    f.write_text('{"problem": "1+1", "answer": "2"}\n')
    return f


@pytest.mark.parametrize("args,match", [(["--limit", "0"], "--limit"), (["--limit", "-1"], "--limit"),
                                        (["--tasks", ","], "names no task"), (["--tasks", "nosuch"], "nosuch")])
def test_eval_bad_arguments_are_argparse_errors(tiny_model_dir, args, match, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(eval_cli, "evaluate", lambda *a, **k: pytest.fail("evaluated despite bad arguments"))
    # --out in a fresh folder: a results.json a user's own eval left in the checkout must not change what is checked
    argv = ["--model", tiny_model_dir, "--tasks", "gsm8k", "--out", str(tmp_path / "results.json"), *args]
    with pytest.raises(SystemExit) as e:
        eval_cli.main(argv)
    assert e.value.code == 2 and match in capsys.readouterr().err


@pytest.mark.parametrize("out", ["/proc/self/results.json", "{tmp}/file/results.json", "{tmp}"])
def test_eval_unwritable_out_fails_before_generating(tiny_model_dir, math_file, tmp_path, out, capsys, monkeypatch):
    (tmp_path / "file").write_text("x")
    monkeypatch.setattr(eval_cli, "evaluate", lambda *a, **k: pytest.fail("generated before checking --out"))
    with pytest.raises(SystemExit) as e:
        eval_cli.main(["--model", tiny_model_dir, "--tasks", f"t={math_file}", "--out", out.format(tmp=tmp_path)])
    assert e.value.code == 2 and "--out" in capsys.readouterr().err


EVAL_BAD = {  # name: (arguments, with {d} = a folder holding the task file t.jsonl; what the error says)
    "--out is the task file": (["--tasks", "t={d}/t.jsonl", "--out", "{d}/t.jsonl"], "--out .*: is the input"),
    "the samples file is the task file": (["--tasks", "t={d}/r.samples.jsonl", "--out", "{d}/r.json"],
                                          "--out's samples file .*: is the input"),
    "--temperature -1": (["--temperature", "-1"], "--temperature must be"),
    "--temperature inf": (["--temperature", "inf"], "--temperature must be"),
    "--top-p 2": (["--top-p", "2"], r"--top-p must be in \(0, 1\]"),
    "--max-new-tokens 0": (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    "--device gpu": (["--device", "gpu"], "--device must be cpu, cuda or cuda:N"),
}


@pytest.mark.parametrize("case", EVAL_BAD)
def test_eval_bad_input_is_named_before_generating_and_changes_no_file(case, tiny_model_dir, tmp_path, capsys,
                                                                        monkeypatch):
    extra, named = EVAL_BAD[case]
    monkeypatch.setattr(eval_cli, "evaluate", lambda *a, **k: pytest.fail("evaluated despite bad input"))
    for name in ("t.jsonl", "r.samples.jsonl"):
        (tmp_path / name).write_text('{"problem": "1+1", "answer": "2"}\n')
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    argv = ["--model", tiny_model_dir, "--tasks", f"t={tmp_path / 't.jsonl'}", "--out", str(tmp_path / "r.json")]
    with pytest.raises(SystemExit) as e:
        eval_cli.main(argv + [a.format(d=tmp_path) for a in extra])
    err = capsys.readouterr().err
    assert e.value.code == 2 and re.search(named, err), err
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before


@pytest.mark.slow
def test_eval_writes_results_whole(tiny_model_dir, math_file, tmp_path):
    out = tmp_path / "r" / "results.json"
    eval_cli.main(["--model", tiny_model_dir, "--tasks", f"t={math_file}", "--out", str(out), "--n", "1",
                   "--max-new-tokens", "2", "--sampler", "torch", "--device", "cpu"])
    assert json.loads(out.read_text())["tasks"]["t"]["problems"] == 1
    assert sorted(p.name for p in out.parent.iterdir()) == ["results.json", "results.samples.jsonl"]


@pytest.mark.parametrize("key", [f.name for f in dataclasses.fields(Config) if f.type in ("int", "float")
                                 and f.name != "seed"])  # any int seeds the generators
def test_every_numeric_knob_has_a_range(key):
    """A new numeric knob needs its range beside it (`config.ranged`), or its own check in validate()."""
    with pytest.raises(ConfigError, match=key):
        load([f"{key}=-1000000"])


# -- scripts/validate_code_data.py --------------------------------------------------------------------------
def validate_script():
    spec = importlib.util.spec_from_file_location("validate_code_data", Path(__file__).parent.parent / "scripts" /
                                                  "validate_code_data.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


VALIDATE_BAD = {  # name: (arguments after the input {d}/code.jsonl; what the error says)
    "--out a directory": (["--out", "{d}"], "--out .*: is a directory"),
    "--out under a file": (["--out", "{d}/code.jsonl/kept.jsonl"], "--out .*: .*code.jsonl' is a file, not a directory"),
    "--out read-only": (["--out", "/proc/self/kept.jsonl"], "--out '/proc/self/kept.jsonl': cannot write"),
    "--out is the input": (["--out", "{d}/code.jsonl"], "--out .*: is the input"),
    "--batch 0": (["--out", "{d}/kept.jsonl", "--batch", "0"], "--batch and --concurrency must be >= 1"),
    "--concurrency 0": (["--out", "{d}/kept.jsonl", "--concurrency", "0"], "--batch and --concurrency must be >= 1"),
}


@pytest.mark.parametrize("case", VALIDATE_BAD)
def test_validate_code_data_bad_input_is_named_before_judging(case, tmp_path, capsys, monkeypatch):
    extra, named = VALIDATE_BAD[case]
    mod = validate_script()
    monkeypatch.setattr(mod, "SandboxPool", lambda *a, **k: pytest.fail("a sandbox started despite bad input"))
    src = tmp_path / "code.jsonl"
    src.write_text(json.dumps({"id": "a", "problem": "Print 1.", "language": "python", "mode": "stdio",
                               "solution": "print(1)", "tests": [{"input": "", "output": "1\n"}]}) + "\n")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as e:
        mod.main([str(src), *[a.format(d=tmp_path) for a in extra]])
    err = capsys.readouterr().err
    assert e.value.code == 2 and re.search(named, err), err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
