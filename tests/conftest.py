import os
from pathlib import Path

import pytest

# Tests are CPU and hermetic: never reach for the hub, and keep thread counts small on 2-core machines.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest.ini's two workers on 2 cores: one thread each, and in what they launch
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # (two threads per process on two shared cores ran 6x slower)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A random tiny Qwen2 (tied embeddings) + BPE tokenizer, as an HF directory."""
    from tiny import build_random_model_dir

    return str(build_random_model_dir(tmp_path_factory.mktemp("tiny_tied"), tie_word_embeddings=True))


@pytest.fixture(scope="session")
def tiny_untied_model_dir(tmp_path_factory):
    """The same with an untied lm_head."""
    from tiny import build_random_model_dir

    return str(build_random_model_dir(tmp_path_factory.mktemp("tiny_untied"), tie_word_embeddings=False))


DEFAULT_MODEL = str(Path(__file__).resolve().parent.parent / "models" / "tiny-arithmetic")


@pytest.fixture(scope="session")
def warm_model_dir():
    """The default run's warm-started tiny model, committed (the same bytes on every machine; see
    tests/test_setup.py for its checksum)."""
    return DEFAULT_MODEL


@pytest.fixture(scope="session")
def device():
    """Where the tests marked `gpu` run: NANOGRPO_TEST_DEVICE (default cpu, as in CI); `NANOGRPO_TEST_DEVICE=cuda
    pytest -m gpu` runs them on a GPU (scripts/gpu_check.py does). Asking for cuda where there is none is an
    error, not a skip: a skipped device test would read as a passed one."""
    import torch

    name = os.environ.get("NANOGRPO_TEST_DEVICE", "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        pytest.fail(f"NANOGRPO_TEST_DEVICE={name}, but torch sees no CUDA device")
    return torch.device(name)
