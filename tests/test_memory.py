"""Memory: the planner's counts against what autograd really keeps, and the memory that
grad_accumulation = "sharded" saves, measured on 2 ranks. Run as a script under torchrun, this file is
its own 2-rank worker."""

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helpers import update_check  # noqa: E402
from nanogrpo import dist, grpo, memory  # noqa: E402
from nanogrpo import model as M  # noqa: E402

CONFIGS = {
    "qwen2": Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=176, num_attention_heads=4, num_key_value_heads=2),
    "llama": LlamaConfig(vocab_size=300, hidden_size=96, intermediate_size=256, num_attention_heads=6, num_key_value_heads=3,
                         head_dim=16),
}


def kept_bytes(hf_config, layers: int, tokens: int, dtype: torch.dtype, checkpointed: bool) -> int:
    """Bytes autograd keeps for backward in the decoder forward of `tokens` tokens, parameters excluded."""
    hf_config.num_hidden_layers = layers
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(hf_config, attn_implementation=M.SEGMENT_SDPA, dtype=dtype)
    if checkpointed:
        for layer in hf.model.layers:
            layer.forward = M._recomputed(layer.forward)
    params = {p.untyped_storage().data_ptr() for p in hf.parameters()}
    seen = set()

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            seen.add((t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()))
        return t

    ids = torch.randint(0, hf_config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(1))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        hf.model(input_ids=ids, use_cache=False)
    return sum(n for _, n in seen)


@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(CONFIGS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("checkpointed", [False, True])
def test_activation_count_per_token_and_layer_is_what_autograd_keeps(arch, dtype, checkpointed):
    """memory.Shape's per-token, per-layer bytes equal the slope of the measured bytes over layers, exactly."""
    shape = memory.shape_of(CONFIGS[arch])
    b = torch.finfo(dtype).bits // 8
    T = 40
    per_layer = (kept_bytes(CONFIGS[arch], 3, T, dtype, checkpointed) - kept_bytes(CONFIGS[arch], 1, T, dtype, checkpointed)) / (2 * T)
    want = b * shape.hidden if checkpointed else shape.activation_bytes_per_token_layer(b)
    assert per_layer == want
    assert shape.llama_like


def test_shape_counts_parameters_exactly():
    shape = memory.shape_of(CONFIGS["llama"])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(CONFIGS["llama"])
    assert shape.params == sum(p.numel() for p in model.parameters())
    assert shape.layer_params * shape.layers + shape.root_params == shape.params


# ---------------------------------------------------------------- grad_accumulation, 2 ranks


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def live_heap_bytes() -> int:
    """Bytes malloc has handed out and not had back (glibc mallinfo2): torch's CPU tensors come from malloc."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


def gradient_bytes(policy) -> int:
    """fp32 gradient bytes this rank holds: sharded .grad of the parameters, and the unsharded gradients FSDP2
    keeps on its own (private) parameters while gradient sync is off."""
    held = sum(p.grad.to_local().numel() * 4 for p in policy.parameters() if p.grad is not None)
    for module in policy.modules():
        group = module._get_fsdp_state()._fsdp_param_group if hasattr(module, "_get_fsdp_state") else None
        for fsdp_param in group.fsdp_params if group else []:
            unsharded = getattr(fsdp_param, "_unsharded_param", None)
            if unsharded is not None and unsharded.grad is not None:
                held += unsharded.grad.numel() * 4
    return held


def accumulate(model_dir: str, out: str) -> None:
    """Worker: per mode, the gradients held and the live heap after the first of two micro-batches (its backward
    done, the last not yet), and the weights after the whole step. A warm-up step first: the process's first
    update keeps memory for good (see the test). Each mode runs twice, alternating, and keeps its smaller heap: a
    one-off allocation of the process (~10 MB, once in a full CI run) lands in at most one of them."""
    device = dist.init("cpu")
    result = {}
    for mode in ("warm-up", "sharded", "unsharded", "sharded", "unsharded"):
        torch.manual_seed(0)
        cfg = update_check.config(micro_batch_size=4, grad_accumulation=mode.replace("warm-up", "sharded"),
                                  skip_zero_advantage=False)
        policy = M.make_policy(model_dir, device, torch.float32, 3, False)
        opt = torch.optim.SGD(policy.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
        rollouts = update_check.fixed_rollouts(4, 4, 200, seed=0, max_completion=9)
        mine = rollouts[dist.rank() :: 2]  # 8 each: two micro-batches of 4 on every rank
        seen = []
        real_sync = policy.set_requires_gradient_sync

        def sync(flag, recurse=True):  # called before each micro-batch: the second call follows the first backward
            seen.append((live_heap_bytes(), gradient_bytes(policy)))
            real_sync(flag, recurse=recurse)

        policy.set_requires_gradient_sync = sync
        before = live_heap_bytes()
        grpo.step(policy, None, opt, sched, mine, cfg, pad_id=1)
        weights = M.full_state_dict_cpu(policy)
        params = sum(p.numel() for p in policy.parameters())
        if mode != "warm-up":
            got = {"heap": seen[1][0] - before, "grads": seen[1][1], "params": params, "weights": weights}
            result[mode] = min(result.get(mode, got), got, key=lambda r: r["heap"])
        del policy, opt
    if dist.is_main():
        torch.save(result, out)
    dist.barrier()
    dist.close()


@pytest.mark.slow
def test_sharded_accumulation_holds_a_shard_of_the_gradients_not_all_of_them(tmp_path):
    """After the first micro-batch's backward, `unsharded` holds every fp32 gradient (4 bytes x params) on each
    rank, `sharded` its half (2 bytes x params); the updates are equal.

    The gradients are counted where FSDP2 keeps them, and the process's live heap (glibc mallinfo2) grows by
    about as much: measured 2.1-2.2 x params bytes with `sharded`, 4.1 with `unsharded`. Both are measured after
    a warm-up step: the first update of a process keeps ~9 MiB for good (3.4 x params bytes of this model),
    whichever mode runs it (sharded first: 5.5 P; unsharded first: 7.5 P, then sharded 2.1 P), which earlier
    read as a cost of `sharded`. It is fixed, not a share of the model: 10 MiB (1.0 P) at 10.4 M parameters,
    and 9 MiB in one process alone."""
    from tiny import build_random_model_dir

    model_dir = build_random_model_dir(tmp_path / "model", hidden_size=256, intermediate_size=768, num_hidden_layers=4)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__,
           str(model_dir), str(tmp_path / "out.pt")]
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, capture_output=True, timeout=300)
    got = torch.load(tmp_path / "out.pt")
    P = got["sharded"]["params"]
    assert P > 2_000_000
    assert got["unsharded"]["grads"] == 4 * P, (got["unsharded"]["grads"], P)
    assert got["sharded"]["grads"] == 2 * P, (got["sharded"]["grads"], P)
    assert got["sharded"]["heap"] < 2.6 * P < 3.6 * P < got["unsharded"]["heap"], {m: got[m]["heap"] / P for m in got}
    for name, w in got["sharded"]["weights"].items():
        torch.testing.assert_close(w, got["unsharded"]["weights"][name], rtol=0, atol=1e-6, msg=name)



ALLOCATOR_PROBE = """
import ctypes, resource, sys, torch
sys.path.insert(0, {root!r})
from nanogrpo import dist
if sys.argv[2] == "early":  # a large tensor before dist.init: too late for torch's huge-page switch
    torch.empty(4 << 20).fill_(0)
ctypes.CDLL(None).prctl(41, 0 if sys.argv[1] == "hugepages" else 1, 0, 0, 0)  # PR_SET_THP_DISABLE elsewhere
dist.init("cpu", sys.argv[1])
print("env left:", "THP_MEM_ALLOC_ENABLE" in __import__("os").environ)  # torch has read it; children must not inherit it
x, y = torch.randn(16, 350, 1536), torch.randn(16, 350, 1536)  # 34 MB each: over glibc's mmap threshold
for _ in range(3):
    (x * y).sum()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):  # what an update does over and over: a large tensor made, written, reduced, freed
    (x * y).sum()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
dist.close()
"""


def thp_enabled() -> bool:
    try:
        return "[never]" not in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False


def page_faults(mode: str, when: str = "first") -> tuple[float, str]:
    """Page faults per (16, 350, 1536) fp32 product under cpu_allocator=mode, and what dist.init printed."""
    out = subprocess.run([sys.executable, "-c", ALLOCATOR_PROBE.format(root=str(ROOT)), mode, when],
                         capture_output=True, text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return float(out.stdout.strip().splitlines()[-1]), out.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt, Linux THP")
@pytest.mark.slow
def test_cpu_allocators_stop_large_tensors_faulting_in_fresh_pages():
    # cpu_allocator promises speed by not faulting in 4 KiB pages for every large tensor: count the page
    # faults per product (8,400 pages of 4 KiB when the result is mmapped fresh each time). reuse: about
    # 0-2,900 measured (torch's 64-byte aligned allocations fragment glibc's heap, so not every block is
    # reused); hugepages: 225-740 measured (a 2 MiB page per fault where the kernel has one free).
    pages = 16 * 350 * 1536 * 4 // os.sysconf("SC_PAGE_SIZE")
    system, _ = page_faults("system")
    assert system > 0.9 * pages
    assert page_faults("reuse")[0] < 0.5 * system
    if thp_enabled():
        faults, printed = page_faults("hugepages")
        assert faults < 0.25 * system and "had no effect" not in printed
        # ... still, with the variable gone from the environment (it leaked into the torchrun workers and the
        # other allocators' probes of a test run that had started a hugepages trainer: 8,401 faults for "reuse")
        assert "env left: False" in printed
        # too late: torch read its switch at the first large tensor; dist.init says so
        faults, printed = page_faults("hugepages", "early")
        assert faults > 0.9 * pages and "had no effect" in printed


def run_script(*args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.slow
def test_plan_memory_says_what_fits_and_what_would():
    # the 1.5B recipe on 8 x 80 GB fits (exit 0); on one 24 GB card it does not (exit 1) and a change that
    # would is named; a bad key stops before any work (exit 2, the key named)
    r = run_script("scripts/plan_memory.py", "configs/math_qwen2.5_1.5b.toml", "--gpus", "8", "--gpu-mem", "80",
                   "--shape", "qwen2.5-1.5b")
    assert r.returncode == 0, r.stderr
    assert "fits" in r.stdout.splitlines()[-1] and "| **update** |" in r.stdout
    r = run_script("scripts/plan_memory.py", "configs/math_qwen2.5_1.5b.toml", "--gpus", "1", "--gpu-mem", "24",
                   "--shape", "qwen2.5-1.5b")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DOES NOT FIT" in r.stdout
    r = run_script("scripts/plan_memory.py", "configs/math_qwen2.5_1.5b.toml", "micro_batch_tokenz=4", "--gpus", "8",
                   "--shape", "qwen2.5-1.5b")
    assert r.returncode == 2 and "micro_batch_tokenz" in r.stderr


@pytest.mark.slow
def test_bench_memory_measures_a_peak_the_planner_predicts(tmp_path):
    # one point on the tiny model: the script's own table and JSON; the planner within 20% of the measured peak
    out = tmp_path / "bench.json"
    r = run_script("scripts/bench/bench_memory.py", "configs/tiny_arithmetic.toml", "prompts_per_step=4", "group_size=4",
                   "--grid", "micro_batch_tokens=64", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    point = json.loads(out.read_text())["points"][0]
    assert point["sequences"] == 16 and point["micro_batches"] > 1
    assert point["times"] and point["matmul_peak"] > 0 and point["flops"] > 0
    assert 0.8 < point["plan"]["peak"] / point["peak_bytes"] < 1.2
    assert "| micro_batch_tokens=64 |" in r.stdout



@pytest.mark.slow
def test_bench_memory_profile_shows_where_the_update_spends_its_time():
    # 64 sequences: the matmuls are ~33% of the update's CPU, first by far; at 4 they were ~10%, level with copies and
    # muls, and a loaded CI machine ranked them sixth once
    r = run_script("scripts/bench/bench_memory.py", "configs/tiny_arithmetic.toml", "prompts_per_step=8", "group_size=8",
                   "--grid", "micro_batch_tokens=0", "--profile", "5")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("-----")]
    rows = lines[rules[1] + 1 : rules[2]]  # the table's body: the 5 ops asked for, one row each
    assert len(rows) == 5 and any("aten::mm" in row for row in rows), rows

if __name__ == "__main__":  # the 2-rank worker: MODEL OUT
    accumulate(sys.argv[1], sys.argv[2])
    print(json.dumps("ok"))
