"""scripts/validate_code_data.py keeps exactly the rows whose reference solution passes."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nanogrpo.sandbox.local import bwrap_available

ROOT = Path(__file__).resolve().parents[1]


def _row(i, solution, expected="3"):
    return {"id": f"r{i}", "problem": "add", "language": "python", "mode": "stdio", "time_limit_s": 2,
            "tests": [{"input": "1 2", "output": expected}], "solution": solution}


@pytest.mark.slow
@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap missing")
def test_validate_keeps_passing_rows_and_reports_each(tmp_path):
    good = "a, b = map(int, input().split())\nprint(a + b)"
    rows = [_row(0, good), _row(1, "print(4)"), _row(2, good, expected="5"), {"id": "r3", "tests": []},
            {k: v for k, v in _row(4, good).items() if k != "solution"}, _row(5, "while True: pass")]
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = subprocess.run([sys.executable, str(ROOT / "scripts/validate_code_data.py"), str(src), "--out", str(dst),
                           "--concurrency", "2"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    verdicts = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [v["verdict"] for v in verdicts] == ["passed", "failed", "failed", "invalid", "invalid", "failed"]
    assert [json.loads(line)["id"] for line in dst.read_text().splitlines()] == ["r0"]
    assert "kept 1" in proc.stderr
