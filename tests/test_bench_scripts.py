"""The generation benchmarks: scripts/bench/bench_sampler.py's roofline against a hand computation and against what
the sampler really does (a floor is never beaten), and scripts/bench/bench_step.py's side-by-side table."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

import bench_sampler  # noqa: E402


def run_script(*args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_roofline_by_hand():
    """One decode step: FLOPs over the peak or bytes over the bandwidth, whichever is longer; prefill is causal."""
    shape = {"matmul_params": 1000, "kv_bytes_per_token": 40, "layers": 2, "attn_width": 8, "context": 512}
    machine = {"peak": 1e6, "bandwidth": 1e4}
    # B=4 rows, 10 cached tokens, 1 new: FLOPs 2*1000*4 + 4*4*1*(10 + 1)*8*2 = 10816 -> 0.010816 s;
    # bytes 4*1000 + 4*11*40 = 5760 -> 0.576 s: memory binds
    assert bench_sampler.floor_seconds(shape, 4, 10, 1, machine) == pytest.approx(0.576)
    machine["bandwidth"] = 1e9  # now the FLOPs bind
    assert bench_sampler.floor_seconds(shape, 4, 10, 1, machine) == pytest.approx(0.010816)
    # prefill of 6 tokens from nothing: 2*1000*4*6 + 4*4*6*(0 + 3.5)*8*2 = 53376 FLOPs
    assert bench_sampler.floor_seconds(shape, 4, 0, 6, machine) == pytest.approx(0.053376)
    prefill, decode = bench_sampler.floors(shape, 4, 6, 3, machine)
    assert prefill == pytest.approx(0.053376)
    assert decode == pytest.approx(sum(bench_sampler.floor_seconds(shape, 4, 6 + t, 1, machine) for t in range(2)))


def test_model_shape_counts_matmul_weights(tiny_model_dir, tiny_untied_model_dir):
    """A tied embedding is the lm_head's matmul weight (counted once); an untied embedding is only a lookup."""
    tied, untied = bench_sampler.model_shape(tiny_model_dir), bench_sampler.model_shape(tiny_untied_model_dir)
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(tiny_untied_model_dir)
    embed = m.get_input_embeddings().weight.numel()
    assert untied["matmul_params"] == sum(p.numel() for p in m.parameters()) - embed
    # tied: the embedding is the lm_head's weight, counted once as a matmul weight; untied: the head counts, the
    # embedding (a lookup) does not. The same matmuls either way.
    assert tied["matmul_params"] == untied["matmul_params"]
    assert sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(tiny_model_dir).parameters()) == tied["matmul_params"]
    assert tied["kv_bytes_per_token"] == 2 * 4 * 2 * 32 * 4  # K and V, 4 layers, 2 kv heads of 32, fp32


@pytest.mark.slow
def test_bench_sampler_table_never_beats_its_floor(tmp_path):
    """The tiny model through the PyTorch sampler and HF generate: the JSON holds every point, and no measured
    time is below its floor (a floor the sampler beats would be a wrong roofline)."""
    out = tmp_path / "bench.json"
    r = run_script("scripts/bench/bench_sampler.py", "--models", "tiny", "--engines", "torch,hf", "--points", "1x16,16x16",
                   "--prompt-len", "16", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    saved = json.loads(out.read_text())
    machine = saved["machine"]
    assert machine["peak"] > 1e9 and machine["bandwidth"] > 1e9
    assert [res["engine"] for res in saved["results"]] == ["torch", "hf"]
    for res in saved["results"]:
        assert [(p["batch"], p["new"]) for p in res["points"]] == [(1, 16), (16, 16)] and res["peak_rss"] > 0
        for p in res["points"]:
            prefill, decode = bench_sampler.floors(res["shape"], p["batch"], 16, p["new"], machine)
            assert p["prefill_s"] >= prefill and p["decode_s"] >= decode
    assert "| tiny-arithmetic | torch | 16 | 16 |" in r.stdout
    again = run_script("scripts/bench/bench_sampler.py", "--from-json", str(out))  # the tables again, nothing measured
    assert again.returncode == 0 and again.stdout.strip() == r.stdout.strip()
    half = tmp_path / "hf.json"  # two runs merge into one table: the hf half alone plus the whole run
    half.write_text(json.dumps({"machine": machine, "results": saved["results"][1:]}))
    merged = run_script("scripts/bench/bench_sampler.py", "--from-json", f"{half},{out}")
    assert merged.returncode == 0 and merged.stdout.count("| tiny-arithmetic | hf | 16 | 16 |") == 2, merged.stdout


@pytest.mark.slow
def test_bench_step_compares_variants_side_by_side():
    r = run_script("scripts/bench/bench_step.py", "configs/tiny_arithmetic.toml", "a: prompts_per_step=4",
                   "b: prompts_per_step=8", "--steps", "4", "--skip", "1", "--rounds", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| a") or line.startswith("| b")]
    assert len(rows) == 2 and rows[0].endswith("| 1.00x |"), r.stdout
    bad = run_script("scripts/bench/bench_step.py", "configs/tiny_arithmetic.toml", "x@/nonexistent: steps=1")
    assert bad.returncode != 0 and "has no train.py" in bad.stderr


@pytest.mark.slow
def test_bench_async_speed_and_learning_tables(tmp_path):
    """scripts/bench/bench_async.py runs its arms and prints a row each: the speed table with the baseline at 1.00x and a
    peak memory per arm (the split placement's: its two processes together), the learning table with its gains."""
    speed = run_script("scripts/bench/bench_async.py", "speed", "--steps", "3", "--repeats", "1", "--async-steps", "0,1,s1",
                       "--out", str(tmp_path), "prompts_per_step=4", "group_size=4")
    assert speed.returncode == 0, speed.stderr[-2000:]
    rows = [line for line in speed.stdout.splitlines() if line.startswith(("| 0 |", "| 1 |", "| 1 split |"))]
    assert len(rows) == 3 and "| 1.00x |" in rows[0] and all(r.endswith("GiB |") for r in rows)
    peak = lambda row: float(row.split(" | ")[-1].removesuffix(" GiB |"))  # noqa: E731
    assert peak(rows[2]) > 1.5 * peak(rows[0])  # two processes, each with its own copy of the model and torch
    learn = run_script("scripts/bench/bench_async.py", "learn", "--seeds", "1", "--arms", "sync,dynamic", "--out",
                       str(tmp_path), "steps=4", "eval_every=2", "eval_size=32", "prompts_per_step=4", "group_size=4")
    assert learn.returncode == 0, learn.stderr[-2000:]
    assert [line.split(" | ")[0] for line in learn.stdout.splitlines() if line.startswith(("| sync", "| dynamic"))] == \
        ["| sync", "| dynamic"]


@pytest.mark.slow
def test_reading_path_counts_a_middle_step_by_role():
    """scripts/bench/reading_path.py counts the loop itself and what runs in its middle step (no evaluation, no save),
    the data types it works with, a fast path with a plain reading the tests hold it to as that reading, each line by
    role, and says what it leaves out; the core a reader follows stays within 10 files and 800 lines."""
    import inspect

    from nanogrpo import sampler

    done = run_script("scripts/bench/reading_path.py", timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {c[1].strip(): [x.strip() for x in c] for c in (line.split("|") for line in done.stdout.splitlines())
            if len(c) == 9}
    ran = lambda f: int(rows[f][3])  # noqa: E731
    read = lambda f, *roles: sum(int(rows[f][4 + i]) for i, r in enumerate(ROLES) if not roles or r in roles)  # noqa: E731
    loop = int(rows["train.py"][2].split("the loop (")[1].split(")")[0])
    assert loop > 30 and read("train.py") > loop and "type Run" in rows["train.py"][2]  # the loop, its Run
    assert read("train.py", "checks") == 3  # the loop reaches the checks through three lines
    assert "nanogrpo/evaluate.py" not in rows and "save (" not in rows["nanogrpo/checkpoint.py"][2]  # a middle step
    assert "type StepRollouts" in rows["nanogrpo/rollout.py"][2] and "policy_loss" in rows["nanogrpo/grpo.py"][2]
    for f in ("nanogrpo/checks/__init__.py", "nanogrpo/checks/sampler.py"):
        assert read(f) == read(f, "checks") > 50, rows[f]  # the checks layer: checks only
    assert read("nanogrpo/log.py") == read("nanogrpo/log.py", "metrics")
    lines = lambda f: len(inspect.getsourcelines(f)[0])  # noqa: E731
    assert "reference_logprobs" in rows["nanogrpo/model.py"][2]  # the log-prob kernel read as its plain reading
    assert read("nanogrpo/logprobs.py") == read("nanogrpo/logprobs.py", "checks") < ran("nanogrpo/logprobs.py")
    plain = lines(inspect.unwrap(sampler.reference_generate)) + lines(sampler._pick)
    assert read("nanogrpo/sampler.py") == ran("nanogrpo/sampler.py") + plain  # the decode loop read plainly
    assert read("nanogrpo/torch_sampler.py") < ran("nanogrpo/torch_sampler.py") - 150
    assert "TorchSampler.close" not in rows["nanogrpo/torch_sampler.py"][2]  # closing the run is not the loop
    total = rows["**total**"]
    assert sum(int(x) for x in total[4:8]) == sum(read(f) for f in rows if f not in ("file", "---", "**total**"))
    left = done.stdout.split("Left out of the count:")[1]
    assert "the set-up before the loop" in left and "module docstrings" in left and "fast path" in left
    last = done.stdout.strip().splitlines()[-1]  # core: F files, L lines read plainly | checks: ... | metrics: ...
    core = last.split(" | ")[0]
    files, lines_read = int(core.split()[1]), int(core.split(", ")[1].split()[0])
    assert core.startswith("core: ") and files <= 10 and lines_read <= 800, last
    assert lines_read == int(total[4]) and " | checks: " in last and " | metrics: " in last


ROLES = ("core", "checks", "metrics", "save")


@pytest.mark.slow  # a save and a resume of the tiny model, ~30 s on 2 cores
def test_bench_checkpoint_prints_its_row():
    r = run_script("scripts/bench/bench_checkpoint.py", "--repeats", "1")
    assert r.returncode == 0, r.stderr[-2000:]
    row = r.stdout.strip().splitlines()[-1].split("|")
    assert row[1].strip() == "tiny-arithmetic" and float(row[4]) > 0 and float(row[5]) > 0


@pytest.mark.slow  # two generate calls and a fingerprint pass of the tiny model, ~5 s
def test_bench_checks_prints_the_checks_cost_beside_what_they_ride_on():
    """The sums on and off draw the same tokens (the script asserts it), and the table has its row."""
    r = run_script("scripts/bench/bench_checks.py", "models/tiny-arithmetic", "--rounds", "2")
    assert r.returncode == 0, r.stderr[-2000:]
    row = [float(x) for x in r.stdout.strip().splitlines()[-1].strip("| ").split(" | ")]
    assert len(row) == 6 and all(x > 0 for x in row) and row[5] == pytest.approx(2 * row[4], abs=2e-3)


@pytest.mark.slow
def test_bench_learning_tables_the_runs_that_finished_when_one_fails(tiny_model_dir, tmp_path):
    """A failed run (here a seed past the config's range, refused at once) stops new runs, but the ones already going
    finish and are tabled before the script exits non-zero naming it: none is left running, orphaned, after the
    script has gone."""
    r = run_script("scripts/bench/bench_learning.py", "--model", str(tiny_model_dir), "--first-seed", "2147483647",
                   "--grpo-seeds", "2", "--jobs", "2", "--out", str(tmp_path), "steps=2", "eval_every=2",
                   "eval_size=8", "prompts_per_step=4", "group_size=2", "save_final=false")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "run ws0-g2147483648 failed (exit 2)" in r.stderr
    assert "1 runs of 2 steps" in r.stdout
    assert "| 2147483647 |" in r.stdout  # the run that was going finished and has its row
    row = next(x for x in r.stdout.splitlines() if "| 2147483647 |" in x).split("|")
    assert 0.12 <= float(row[7]) <= 1.0  # its last eval's top-answer share: at least 1 of the 8 answers (1/8 prints 0.12)
    # the constant-answer line: the held-out sums' most common one, with its share of the 8 rows
    line = next(x for x in r.stdout.splitlines() if x.startswith("one answer for every question"))
    assert "always '" in line and " scores 0.125 on" in line  # 8 held-out sums, all different: 1 of 8


def test_constant_answer_is_the_most_common_gold_and_its_share():
    """What one answer for every question scores: the bar a held-out gain is read against (letter counting's first
    recipe ended at exactly its constant, 0.63)."""
    from nanogrpo.evaluate import constant_answer

    rows = [{"answer": a} for a in ["1", " 1", "2", "1", "3", "2", "1", "4"]] + [{"problem": "no gold"}]
    assert constant_answer(rows) == ("1", 0.5)  # 4 of the 8 golds ("1" and " 1" are one answer)
    assert constant_answer([{"answer": 7}]) == ("7", 1.0)
    assert constant_answer([{"problem": "x"}]) is None


@pytest.mark.slow
def test_bench_transfer_tables_each_model_and_keeps_a_finished_one(tiny_model_dir, tmp_path):
    """One eval.py per model, its results side by side; a model whose results file is there is read, not redone
    (a stopped sweep goes on); a model path that is no model is refused before any eval."""
    spec = "reasoning_gym:products(max_digits=1, system_prompt=direct)"
    common = ["--out", str(tmp_path), "--tasks", spec, "--limit", "4", "--max-new-tokens", "4", "--sampler", "torch"]
    r = run_script("scripts/bench/bench_transfer.py", "--model", f"a={tiny_model_dir}", *common)
    assert r.returncode == 0, r.stderr[-2000:]
    first = (tmp_path / "a.json").stat().st_mtime_ns
    r = run_script("scripts/bench/bench_transfer.py", "--model", f"a={tiny_model_dir}", "--model", f"b={tiny_model_dir}",
                   *common)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "a.json").stat().st_mtime_ns == first and "== a:" not in r.stdout and "== b:" in r.stdout
    header, _, row = r.stdout.strip().splitlines()[-3:]
    assert header == "| task | a | b |"
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[0] == spec
    for name, c in zip("ab", cells[1:]):
        res = json.loads((tmp_path / f"{name}.json").read_text())["tasks"][spec]
        right = round(res["metrics"]["pass@1:n=1"] * 4)
        assert c == f"{100 * right / 4:.1f}% ({right}/4)"  # RG tasks have no lenient score
    bad = run_script("scripts/bench/bench_transfer.py", "--model", f"c={tmp_path}", *common)
    assert bad.returncode == 2 and "has no config.json" in bad.stderr and not (tmp_path / "c.json").exists()


@pytest.mark.slow  # ~15 s of simulation
def test_bench_sample_z_selection_shows_the_kept_groups_biased_and_the_first_draw_not():
    """The simulation behind reading dynamic sampling's first draw: at low entropy the kept groups' z sits near -2 a
    step and the gate stops most runs; the first draw's is N(0, 1) and stops none."""
    r = run_script("scripts/bench/bench_sample_z.py", "selection", "--steps", "20", "--runs-per-setting", "60")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = {(c[1], c[3]): c for c in (
        [x.strip() for x in line.split("|")] for line in r.stdout.splitlines() if line.startswith("| 0."))}
    assert float(rows[("0.01", "kept groups")][4]) < -2 and float(rows[("0.01", "kept groups")][7]) > 0.9
    for eps in ("0.002", "0.01", "0.05"):
        first = rows[(eps, "first draw")]
        assert abs(float(first[4])) < 0.2 and 0.85 < float(first[5]) < 1.15 and float(first[7]) == 0.0


def test_heldout_top_answer_is_the_share_of_the_most_common_answer_given(tiny_model_dir):
    """The held-out eval's collapse detector: the share of the policy's answers that are its most common one, word
    for word (letter counting's checkpoint answered "1" to 97 of 100), whatever their accuracy."""
    from nanogrpo import config
    from nanogrpo.evaluate import heldout_accuracy, heldout_rows
    from nanogrpo.model import load_tokenizer
    from nanogrpo.sampler import Completion

    cfg = config.load([f"model={tiny_model_dir}", "eval_size=8"])
    rows = heldout_rows(cfg)
    texts = [str(rows[0]["answer"]), " 5 ", "5", "7", "5", str(rows[5]["answer"]), "5", "x"]  # "5" 4 times of 8

    class Fixed:
        def generate(self, prompts, n, params):
            assert len(prompts) == 8 and n == 1
            return [[Completion([1], [0.0], t, "stop")] for t in texts]

    got = heldout_accuracy(Fixed(), load_tokenizer(tiny_model_dir), rows, cfg)
    assert got["heldout_top_answer"] == 0.5
    right = sum(str(r["answer"]) == t.strip() for r, t in zip(rows, texts))
    assert got["heldout_accuracy"] == right / 8 and right >= 2  # the accuracy is its own measure


@pytest.mark.slow
def test_split_decode_parts_add_up_to_the_decode_and_leave_the_sampler_as_it_was(tiny_model_dir):
    """bench_sampler.py --split: the parts of the decode (timed by wrappers) sum to its time, each is >= 0, and the
    wrappers are gone after: the same call gives the same tokens as before."""
    import nanogrpo.torch_sampler as ts

    engine = bench_sampler.Engine("torch", tiny_model_dir, 4, 0.0)
    prompts = bench_sampler.random_prompts(engine.tokenizer, 4, 8, seed=0)
    from nanogrpo.sampler import SamplingParams

    before = engine.s.generate(prompts, 1, SamplingParams(max_new_tokens=6, temperature=1.0, seed=5))
    linear, update, sample = ts._onednn_linear, ts.KVCache.update, ts.sample_next
    sp = bench_sampler.split_decode(engine, prompts, 6)
    assert sp["steps"] == 5 and sp["decode_s"] > 0
    parts = [sp[k] for k in bench_sampler.SPLIT_PARTS]
    assert all(x >= 0 for x in parts), sp
    assert sum(parts) == pytest.approx(sp["decode_s"], rel=1e-6)
    assert sp["attention"] > 0 and sp["cache_write"] > 0 and sp["sampling"] > 0 and sp["rest_of_forward"] > 0
    assert (ts._onednn_linear, ts.KVCache.update, ts.sample_next) == (linear, update, sample)
    assert "_forward" not in vars(engine.s)
    after = engine.s.generate(prompts, 1, SamplingParams(max_new_tokens=6, temperature=1.0, seed=5))
    assert [[c.token_ids for c in g] for g in after] == [[c.token_ids for c in g] for g in before]
