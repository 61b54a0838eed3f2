"""scripts/bench/bench_peer.py: whole steps of nanogrpo against TRL's GRPOTrainer on one recipe. The table's reading
(the ratio per seed, pooled step times, held-out accuracy), and the script run end to end on the tiny model: the
nanogrpo arm always (TRL's venv is not needed: its arm is skipped, and said so), both arms where .venv-trl exists."""

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

import bench_peer  # noqa: E402

TRL_PYTHON = ROOT / ".venv-trl" / "bin" / "python"


def steps(times, **phases):
    return [{"time_step": t, "time_generate": t / 4, "time_train": t / 2, "generated_tokens": 100.0, "accuracy": 0.5,
             **phases} for t in times]


def fake_results():
    """Two seeds; nanogrpo 1 s a step, TRL 3 s (seed 0) and 2 s (seed 1) after one warm-up step."""
    runs = {}
    for seed, trl_t in ((0, 3.0), (1, 2.0)):
        runs[str(seed)] = {
            "nanogrpo": {"steps": steps([9.0] + [1.0] * 4, time_sync=0.01), "rss": 1e9,
                         "heldout": {"heldout_accuracy": 0.25 + seed / 10, "rows": 10}},
            "trl": {"steps": steps([9.0] + [trl_t] * 4), "rss": 2e9, "same_prompt_ids": 1.0,
                    "heldout": {"heldout_accuracy": 0.2, "rows": 10}},
        }
    runs["0"]["start"] = {"heldout": {"heldout_accuracy": 0.1, "rows": 10}}
    return [{"recipe": "tiny", "steps": 5, "warmup": 1, "seeds": [0, 1], "runs": runs}]


def table_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        if line.startswith("| tiny"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[1]] = cells
    return rows


def test_table_reads_the_ratio_per_seed_and_pools_the_steps_after_warmup(capsys):
    bench_peer.print_table(fake_results(), {"machine": "test machine", "nanogrpo": "abc", "trl": "1.16.0",
                                            "command": "python scripts/bench/bench_peer.py"})
    out = capsys.readouterr().out
    assert "test machine" in out and "TRL 1.16.0" in out and "python scripts/bench/bench_peer.py" in out
    rows = table_rows(out)
    nano, trl, start = rows["nanogrpo"], rows["TRL GRPOTrainer"], rows["start model"]
    assert nano[2] == "8 (2)" and trl[2] == "8 (2)"  # 4 timed steps per seed: the warm-up step left out
    assert float(nano[3]) == pytest.approx(1.0) and float(trl[3]) == pytest.approx(2.5)  # pooled medians
    assert nano[-1].startswith("2.50x (3.00, 2.00)")  # per seed TRL / nanogrpo, then their median
    assert trl[-1] == "-"
    assert nano[-2] == "0.300 (0.250, 0.350)" and trl[-2] == "0.200 (0.200, 0.200)"
    assert float(nano[5]) == pytest.approx(0.25) and float(nano[7]) == pytest.approx(0.5)  # generate, update
    assert float(nano[8]) == pytest.approx(0.01) and trl[8] == "-"  # sync where the system reports it
    assert float(nano[11]) == pytest.approx(400.0)  # 100 tokens over 0.25 s of generation
    assert float(nano[12]) == pytest.approx(1.0) and float(trl[12]) == pytest.approx(2.0)  # peak RSS, GB
    assert start[-2] == "0.100"


def test_table_says_when_trl_tokenized_the_prompts_differently(capsys):
    res = fake_results()
    res[0]["runs"]["1"]["trl"]["same_prompt_ids"] = 0.5
    bench_peer.print_table(res, {})
    assert "for 50% of the prompts" in capsys.readouterr().out


def run(tmp_path, *args, timeout=900):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench" / "bench_peer.py"), "--steps", "4", "--warmup",
                        "1", "--seeds", "0", "--eval-size", "16", "--out", str(tmp_path), *args],
                       capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


@pytest.mark.slow
def test_bench_peer_runs_the_tiny_recipe_and_prints_its_table_without_trl(tmp_path):
    out = run(tmp_path, "--trl-python", str(tmp_path / "no-such-venv" / "python"))
    assert "TRL arm skipped" in out
    rows = table_rows(out)
    assert set(rows) == {"nanogrpo", "start model"}, out
    nano = rows["nanogrpo"]
    assert nano[0] == "tiny (4 steps)" and nano[2] == "3 (1)"
    assert float(nano[3]) > 0 and float(nano[5]) > 0 and float(nano[7]) > 0  # s/step, generate, update
    assert float(nano[11]) > 0 and float(nano[12]) > 0.1  # generated tokens/s, peak RSS (GB)
    acc = float(re.match(r"([\d.]+) \(", nano[-2]).group(1))
    assert 0.0 <= acc <= 1.0
    # the metrics train.py wrote are what the table read: the median of the steps after the warm-up
    metrics = [json.loads(line) for line in (tmp_path / "tiny" / "nanogrpo-s0" / "metrics.jsonl").read_text().splitlines()]
    assert float(nano[3]) == pytest.approx(statistics.median(m["time_step"] for m in metrics[1:]), abs=1e-3)
    # the saved results print the same table
    again = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench" / "bench_peer.py"), "--from-json",
                            str(tmp_path / "peer.json")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert table_rows(again.stdout) == rows


@pytest.mark.slow
@pytest.mark.skipif(not TRL_PYTHON.is_file(), reason="no TRL venv at .venv-trl (bench_peer.py's docstring installs it)")
def test_bench_peer_runs_both_arms_where_trl_is_installed(tmp_path):
    out = run(tmp_path)
    rows = table_rows(out)
    assert {"nanogrpo", "TRL GRPOTrainer"} <= set(rows), out
    assert re.match(r"[\d.]+x \([\d.]+\)", rows["nanogrpo"][-1])
    assert "tokenization equals" not in out  # TRL tokenized the same prompt ids as nanogrpo


def test_from_json_merges_the_seeds_of_several_runs(tmp_path):
    """A seed whose TRL arm failed in one run and was run again in another: the complete pair is read."""
    first, second = fake_results(), fake_results()
    del first[0]["runs"]["1"]["trl"]  # seed 1 incomplete in the first file
    second[0]["runs"] = {"1": second[0]["runs"]["1"]}
    second[0]["runs"]["1"]["trl"]["steps"] = steps([9.0] + [4.0] * 4)
    for name, res in (("a.json", first), ("b.json", second)):
        (tmp_path / name).write_text(json.dumps({"meta": {"command": "x"}, "results": res}))
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench" / "bench_peer.py"), "--from-json",
                        f"{tmp_path / 'a.json'},{tmp_path / 'b.json'}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    nano = table_rows(r.stdout)["nanogrpo"]
    assert nano[2] == "8 (2)" and nano[-1].startswith("3.50x (3.00, 4.00)")
