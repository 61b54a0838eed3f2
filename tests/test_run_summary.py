"""scripts/run_summary.py against hand-computed means of a small metrics.jsonl."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_summary_of_a_resumed_run(tmp_path):
    lines = [{"step": 0, "heldout_accuracy": 0.1}]
    for s in range(1, 5):
        lines.append({"step": s, "accuracy": s / 10, "completion_len_mean": 100 - s, "time_step": 60.0,
                      "time_generate": 30.0, "time_train": 24.0})
    lines[-1]["heldout_accuracy"] = 0.4
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_summary.py"), str(tmp_path), "--window", "2"],
                         capture_output=True, text=True, check=True).stdout
    assert "| 0 | heldout_accuracy | 0.100 |" in out and "| 4 | heldout_accuracy | 0.400 |" in out
    assert "| accuracy | 0.15 | 0.35 | 0.25 |" in out  # steps 1-2, 3-4, all
    assert "| completion_len_mean | 98.5 | 96.5 | 97.5 |" in out
    assert "| step | 4.0 |" in out and "| generate | 2.0 |" in out and "| train | 1.6 |" in out


def test_missing_run_is_a_clear_error(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_summary.py"), str(tmp_path / "nope")],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "metrics.jsonl not found" in res.stderr


def test_several_seeds_side_by_side(tmp_path):
    for name, (a, b) in {"s1": (0.05, 0.20), "s2": (0.05, 0.11), "s3": (0.06, 0.30)}.items():
        (tmp_path / name).mkdir()
        rows = [{"step": 0, "heldout_accuracy": a}, {"step": 14, "heldout_accuracy": b, "time_step": 1.0}]
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_summary.py"),
                          *(str(tmp_path / n) for n in ("s1", "s2", "s3"))], capture_output=True, text=True, check=True).stdout
    assert "| 0.050 | 0.110 (14) | +6.0 pts |" in out
    # gains 15, 6, 24: mean 15, std 9
    assert "mean +15.0, min +6.0, max +24.0, std 9.0 pts" in out

