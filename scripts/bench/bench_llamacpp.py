"""The llama.cpp side of `scripts/bench/bench_sampler.py`: batched generation timed, one JSON in, one JSON out.

Run with the Python that has llama-cpp-python (default `.venv-llama/bin/python`, never a dependency of
nanogrpo), as a subprocess:

    echo '{"gguf": ".cache/smollm2-135m-instruct-f32.gguf", "prompts": [[1, 2, 3], [4, 5]],
           "max_new_tokens": 32, "threads": 1, "temperature": 0, "seed": 0}' \
        | .venv-llama/bin/python scripts/bench/bench_llamacpp.py

Input (stdin), one object: gguf (path), prompts (lists of token ids), max_new_tokens M, threads, temperature,
seed; optional: n_ctx (default B x (longest prompt + M), rounded up to 256 per sequence), n_batch
(= n_ubatch; default all the prompt tokens, up to 4096, so the prefill is one llama_decode), type_kv
("f32", the default, or "f16") and flash_attn (default false). The defaults run the same fp32
arithmetic as the PyTorch sampler (log-probs within 6e-5 of the HF model's on SmolLM2-135M); llama.cpp's
own defaults (llama-cli, llama-server) are an f16 KV cache and, on CPU, flash attention, which move
log-probs by ~2e-2 (f16 keys and values; flash attention also rounds the queries to f16).
Output (stdout), one object: prefill_s, decode_s, prompt_tokens, new_tokens, tokens (the M new ids of
each prompt), llama_cpp (version), config (what the context was built with) and peak_rss (bytes).

All prompts run as ONE batch of B = len(prompts) sequences through the low-level API (llama_batch_init /
llama_decode, one seq_id per sequence, n_seq_max = B, which llama.cpp caps at 256): the prefill decodes
every prompt at once (in chunks of n_batch tokens if they do not fit one), asking for logits only at each
prompt's last token; then M - 1 decode steps of one token per sequence. EOS is ignored: every row gets
exactly M new tokens, so decode runs at a fixed batch size. prefill_s covers the prompt decodes and the
first draw, decode_s the M - 1 steps with their draws (decode tokens/s = B * (M - 1) / decode_s).
Sampling is ours, not llama.cpp's sampler chain: argmax when temperature == 0, otherwise a draw from
softmax(logits / T) with numpy (seeded) from the logits llama.cpp returns (llama_get_logits_ith); it
costs a little time (a softmax over the vocabulary per row and step, inside the timings). One untimed
warm-up (a short prefill of every sequence and a few steps) runs first; the KV cache is cleared after
it (llama_memory_clear).

Written against llama-cpp-python 0.3.36 (llama_memory_* replaced the llama_kv_self_* functions;
llama_model_load_from_file / llama_init_from_model replaced llama_load_model_from_file /
llama_new_context_with_model).
"""

from __future__ import annotations

import ctypes
import json
import sys
import time
from pathlib import Path

import numpy as np

try:
    import llama_cpp as L
except ImportError as e:
    sys.exit(f"bench_llamacpp: llama_cpp is not importable by {sys.executable} ({e}); "
             "run this with the llama-cpp-python venv (python -m venv .venv-llama && "
             ".venv-llama/bin/pip install numpy llama-cpp-python)")

KV_TYPES = {"f32": L.GGML_TYPE_F32, "f16": L.GGML_TYPE_F16}


@L.llama_log_callback
def _log(level, text, user_data):  # keep stdout for the JSON; show llama.cpp's errors only
    if level == 3:  # GGML_LOG_LEVEL_ERROR
        sys.stderr.write(text.decode("utf-8", "replace"))


class Engine:
    def __init__(self, gguf: str, n_seq: int, n_ctx: int, n_batch: int, threads: int, type_kv: str, flash_attn: bool):
        mparams = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(gguf.encode(), mparams)
        if not self.model:
            sys.exit(f"bench_llamacpp: llama.cpp could not load {gguf}")
        cparams = L.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = cparams.n_ubatch = n_batch
        cparams.n_seq_max = n_seq
        cparams.n_threads = cparams.n_threads_batch = threads
        cparams.type_k = cparams.type_v = KV_TYPES[type_kv]
        cparams.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cparams.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            sys.exit(f"bench_llamacpp: llama.cpp could not create a context (n_ctx {n_ctx}, n_seq_max {n_seq}, "
                     f"n_batch {n_batch}); see its error above")
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.n_batch = L.llama_n_batch(self.ctx)
        self.batch = L.llama_batch_init(self.n_batch, 0, 1)
        self.config = {"n_ctx": L.llama_n_ctx(self.ctx), "n_ctx_seq": L.llama_n_ctx_seq(self.ctx),
                       "n_seq_max": L.llama_n_seq_max(self.ctx), "n_batch": self.n_batch,
                       "n_ubatch": L.llama_n_ubatch(self.ctx), "threads": threads, "type_kv": type_kv,
                       "flash_attn": flash_attn}

    def clear(self) -> None:
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)

    def decode(self, items: list[tuple[int, int, int, bool]]) -> list[np.ndarray]:
        """Decode (token, pos, seq, wants_logits) items in chunks of n_batch; the logits asked for, in order."""
        out = []
        b = self.batch
        for start in range(0, len(items), self.n_batch):
            chunk = items[start:start + self.n_batch]
            rows = []
            for i, (tok, pos, seq, logits) in enumerate(chunk):
                b.token[i], b.pos[i], b.n_seq_id[i], b.seq_id[i][0], b.logits[i] = tok, pos, 1, seq, logits
                if logits:
                    rows.append(i)
            b.n_tokens = len(chunk)
            rc = L.llama_decode(self.ctx, b)
            if rc != 0:
                sys.exit(f"bench_llamacpp: llama_decode returned {rc} (1: no KV slot, the context is too small)")
            for i in rows:  # copied out now: the next decode overwrites them
                out.append(np.ctypeslib.as_array(L.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,)).copy())
        return out

    def close(self) -> None:
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)


def draw(logits: list[np.ndarray], temperature: float, rng: np.random.Generator) -> list[int]:
    x = np.stack(logits)
    if temperature == 0:
        return x.argmax(1).tolist()
    x = x.astype(np.float64) / temperature
    p = np.exp(x - x.max(1, keepdims=True))
    cdf = np.cumsum(p, 1)
    u = rng.random((len(x), 1)) * cdf[:, -1:]
    return np.minimum((cdf < u).sum(1), x.shape[1] - 1).tolist()


def generate(eng: Engine, prompts: list[list[int]], m: int, temperature: float, rng) -> tuple[list, float, float]:
    t0 = time.perf_counter()
    items = [(tok, j, s, j == len(p) - 1) for s, p in enumerate(prompts) for j, tok in enumerate(p)]
    nxt = draw(eng.decode(items), temperature, rng)
    t1 = time.perf_counter()
    out = [[t] for t in nxt]
    pos = [len(p) for p in prompts]
    for _ in range(m - 1):
        nxt = draw(eng.decode([(t, pos[s], s, True) for s, t in enumerate(nxt)]), temperature, rng)
        for s, t in enumerate(nxt):
            out[s].append(t)
            pos[s] += 1
    return out, t1 - t0, time.perf_counter() - t1


def peak_rss() -> int:
    """This process's peak resident memory in bytes (VmHWM; the GGUF is memory-mapped, so its pages count)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    spec = json.load(sys.stdin)
    gguf, prompts, m = spec["gguf"], spec["prompts"], int(spec["max_new_tokens"])
    if not Path(gguf).is_file():
        sys.exit(f"bench_llamacpp: no GGUF file at {gguf} (scripts/models/smollm2_to_gguf.py writes the SmolLM2 one)")
    if not prompts or not all(prompts) or m < 1:
        sys.exit("bench_llamacpp: needs at least one non-empty prompt and max_new_tokens >= 1")
    n_seq = len(prompts)
    if n_seq > L.llama_max_parallel_sequences():
        sys.exit(f"bench_llamacpp: {n_seq} prompts; llama.cpp runs at most "
                 f"{L.llama_max_parallel_sequences()} sequences at once")
    threads, temperature = int(spec.get("threads", 1)), float(spec.get("temperature", 0.0))
    longest = max(len(p) for p in prompts)
    # llama.cpp splits n_ctx evenly between the sequences and pads each share to a multiple of 256.
    n_ctx = int(spec.get("n_ctx") or n_seq * -(-(longest + m) // 256) * 256)
    prompt_tokens = sum(len(p) for p in prompts)
    n_batch = int(spec.get("n_batch") or min(max(prompt_tokens, n_seq), 4096))
    L.llama_log_set(_log, ctypes.c_void_p(0))
    L.llama_backend_init()
    eng = Engine(gguf, n_seq, n_ctx, n_batch, threads,
                 spec.get("type_kv", "f32"), bool(spec.get("flash_attn", False)))
    try:
        rng = np.random.default_rng(spec.get("seed", 0))
        generate(eng, [p[:8] for p in prompts], min(m, 4), temperature, rng)  # warm-up, untimed
        eng.clear()
        rng = np.random.default_rng(spec.get("seed", 0))
        tokens, prefill_s, decode_s = generate(eng, prompts, m, temperature, rng)
    finally:
        eng.close()
        L.llama_backend_free()
    json.dump({"prefill_s": prefill_s, "decode_s": decode_s, "prompt_tokens": prompt_tokens,
               "new_tokens": n_seq * m, "tokens": tokens, "llama_cpp": L.__version__, "config": eng.config,
               "peak_rss": peak_rss()}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
