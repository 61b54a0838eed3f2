"""Code rows: every invalid field is reported, naming the field (one check, `validate_problem`, used by the
reward, the converters and scripts/validate_code_data.py); validate_code_data.py never loses its input."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nanogrpo.sandbox import validate_problem

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "scripts/validate_code_data.py")


def row(**kw):
    r = {"id": "r", "problem": "add", "language": "python", "mode": "stdio", "time_limit_s": 2,
         "memory_limit_mb": 256, "tests": [{"input": "1 2", "output": "3"}],
         "solution": "a, b = map(int, input().split())\nprint(a + b)"}
    return {**r, **kw}


def call_row(inp="[3]", out="4"):
    return row(mode="call", fn_name="f", tests=[{"input": inp, "output": out}], solution="def f(x): return x + 1")


BAD = [
    (row(memory_limit_mb=-5), "memory_limit_mb"),
    (row(memory_limit_mb=0), "memory_limit_mb"),
    (row(memory_limit_mb="abc"), "memory_limit_mb"),
    (row(memory_limit_mb=1e30), "memory_limit_mb"),
    (row(time_limit_s=-1), "time_limit_s"),
    (row(time_limit_s="abc"), "time_limit_s"),
    (row(time_limit_s=1e30), "time_limit_s"),
    (row(time_limit_s=float("nan")), "time_limit_s"),
    (row(time_limit_s=True), "time_limit_s"),
    (call_row(inp="3"), "input"),
    (call_row(inp="not json"), "input"),
    (call_row(out="{broken"), "output"),
]


@pytest.mark.parametrize("bad,field", BAD, ids=[f"{f}={json.dumps(b.get(f, b['tests'][0]))[:20]}" for b, f in BAD])
def test_invalid_field_is_named(bad, field):
    with pytest.raises(ValueError, match=field):
        validate_problem(bad)


def test_every_invalid_field_is_reported_at_once():
    with pytest.raises(ValueError) as e:
        validate_problem(row(memory_limit_mb=-5, time_limit_s="abc"))
    assert "memory_limit_mb" in str(e.value) and "time_limit_s" in str(e.value)


def test_valid_rows_pass():
    validate_problem(row())
    validate_problem(row(time_limit_s=0.5, memory_limit_mb=64.0))
    validate_problem(call_row())
    validate_problem({k: v for k, v in row().items() if k not in ("time_limit_s", "memory_limit_mb")})


def run_script(src, dst, *extra):
    return subprocess.run([sys.executable, SCRIPT, str(src), "--out", str(dst), "--concurrency", "1", *extra],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_validate_script_reports_each_invalid_field(tmp_path):
    rows = [b for b, _ in BAD]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = run_script(src, tmp_path / "out.jsonl")
    assert proc.returncode == 0, proc.stderr
    verdicts = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [v["verdict"] for v in verdicts] == ["invalid"] * len(BAD)
    for v, (_, field) in zip(verdicts, BAD):
        assert field in v["status"], v


@pytest.mark.parametrize("how", ["same", "relative", "symlink"])
@pytest.mark.slow
def test_validate_script_refuses_to_overwrite_its_input(tmp_path, how, monkeypatch):
    src = tmp_path / "in.jsonl"
    text = json.dumps(row()) + "\n"
    src.write_text(text)
    monkeypatch.chdir(tmp_path)
    dst = {"same": src, "relative": Path("./sub/../in.jsonl"), "symlink": tmp_path / "link.jsonl"}[how]
    (tmp_path / "sub").mkdir()
    if how == "symlink":
        os.symlink(src, dst)
    proc = run_script(src, dst)
    assert proc.returncode != 0 and "is the input" in proc.stderr
    assert src.read_text() == text
