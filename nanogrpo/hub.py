"""Models and datasets named by their Hugging Face Hub ids: the only file that imports huggingface_hub or datasets.

`model_dir(id)` downloads a model once to the HF cache and returns its snapshot directory (HF_HUB_OFFLINE=1: the
cache only); `dataset_records(id, split, subset)` reads a dataset through `datasets.load_dataset`. Both import
inside the function: nothing is fetched or imported until an id is used, and a local path is never looked up
(docs/pipeline.md, "Models and datasets by Hub id").
"""

from __future__ import annotations

import re
from pathlib import Path

# owner/name, as the Hub spells repository ids (a local relative path of two parts looks the same:
# a path that exists always wins, see is_hub_id)
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# What loading a causal LM and its tokenizer needs: no .bin / .pth / .gguf duplicates of the weights.
MODEL_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken", "tokenizer*"]


class HubError(FileNotFoundError):
    """A Hub id that could not be resolved: not reachable and not cached, or a package is missing."""


def is_hub_id(name: str) -> bool:
    """True for `owner/name` that is not an existing local path and has no data-file suffix."""
    return bool(_HUB_ID.fullmatch(name)) and not Path(name).exists() and Path(name).suffix not in (".jsonl", ".parquet")


def model_dir(name: str) -> str:
    """A local model directory for `name`: the name itself when it is not a Hub id, else the snapshot
    of the Hub repository in the local cache (downloaded first where the Hub is reachable)."""
    if not is_hub_id(name):
        return name
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(name, allow_patterns=MODEL_FILES)
    except Exception as e:  # offline and not cached, unknown repo, no network, gated: one error naming the id
        raise HubError(f"model directory not found: {name!r} is not a local directory, and as a Hub model id it is "
                       f"neither in the local cache nor reachable ({type(e).__name__}: {e})") from e


def dataset_records(repo_id: str, split: str = "train", subset: str | None = None) -> list[tuple[str, dict]]:
    """(where, row) for every row of a Hub dataset's split (subset = the dataset's config name)."""
    try:
        import datasets
    except ImportError:
        raise HubError(f"dataset {repo_id!r} is a Hub id: loading it needs the `datasets` package "
                       "(pip install datasets)") from None
    try:
        ds = datasets.load_dataset(repo_id, subset or None, split=split)
    except Exception as e:  # not cached offline, unknown id, unknown subset or split
        what = f"{repo_id!r}" + (f" (subset {subset!r})" if subset else "") + f" split {split!r}"
        raise HubError(f"dataset {what}: not a local file, and not loadable from the Hub or the local cache "
                       f"({type(e).__name__}: {e})") from e
    return [(f"{repo_id}[{split}] row {i}", dict(row)) for i, row in enumerate(ds, 1)]
