"""A checkpoint's integrity: its manifest (every file's size and SHA-256, the model it was made from), the checks
that read it, and the agreement of every rank on a write that failed. checkpoint.py writes and reads the files;
this file says whether they are whole.

    manifest.json  {"step": N, "model": DIR, "files": {rel: size}, "sha256": {rel: hex}}   <- written last

A failed write on any rank fails on every rank (`Writing`); the hashes find damage, not an adversary: who measures
what, and why: docs/architecture.md, "Checkpoints".
"""

from __future__ import annotations

import errno
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

import torch
from torch.distributed.checkpoint.api import CheckpointException

from nanogrpo import dist, files

MANIFEST = "manifest.json"
FULL_DISK_BYTES = 16 << 20  # a write that failed with less than this free on its file system failed for space


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message names the step, the file and what is intact."""


def owner(rel: str) -> int:
    """The rank that writes, and so measures for the manifest, a checkpoint file: each rank its RNG state
    and its optimizer shards (torch.distributed.checkpoint names them __RANK_N.distcp), rank 0 the rest."""
    m = re.fullmatch(r"rng_rank(\d+)\.pt|optim/__(\d+)_\d+\.distcp", rel)
    return int(m.group(1) or m.group(2)) if m else 0


def sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def nonfinite(tensors: dict) -> str | None:
    """What is not finite among the tensors about to be saved (None: all finite)."""
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            n = int((~torch.isfinite(t)).sum())
            return (f"the weight {name!r} holds {n} value(s) that are not finite (NaN or inf): a checkpoint never "
                    "holds one, so none was written")
    return None


# -- writing: every rank agrees on a failure ----------------------------------------------------------------

def _causes(e: BaseException):
    """`e`, what it was raised from, and the per-rank failures inside a torch.distributed.checkpoint error."""
    seen, todo = set(), [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        todo += [x.__cause__, x.__context__]
        todo += [f[0] if isinstance(f, tuple) else f for f in (getattr(x, "failures", None) or {}).values()]


def _describe(e: BaseException, path: Path) -> str:
    """What went wrong writing `path`: a full disk is said so. torch.save reports one without an errno
    ("unexpected pos ..."), safetensors in its message: the file system's free space decides then."""
    for x in _causes(e):
        if isinstance(x, OSError) and x.errno in (errno.ENOSPC, errno.EDQUOT):
            what = "no space left on device" if x.errno == errno.ENOSPC else "disk quota exceeded"
            return f"{what} writing {x.filename or path}"
    try:
        free = shutil.disk_usage(next(p for p in (path, *path.parents) if p.exists())).free
    except (OSError, StopIteration):
        free = None
    if "No space left on device" in str(e) or (free is not None and free < FULL_DISK_BYTES):
        return f"no space left on device writing {path}" + (f" ({free} bytes free)" if free is not None else "")
    first = (str(e).strip().splitlines() or [""])[0]
    return f"writing {path} failed ({type(e).__name__}: {first})"


def _attempt(path: Path, write) -> str | None:
    """Run `write`; None when it worked, else what went wrong (see _describe)."""
    try:
        write()
    except (Exception, CheckpointException) as e:  # CheckpointException is a BaseException
        return _describe(e, path)
    return None


class Writing:
    """Checkpoint `step` being written into `tmp` by every rank. Each write is followed by a collective that shares
    every rank's failure (the first in rank order wins), so ranks never wait on one that stopped: on a failure the
    partial checkpoint is removed and every rank raises CheckpointError."""

    def __init__(self, out_dir: str, step: int, tmp: Path):
        self.out_dir, self.step, self.tmp = out_dir, step, tmp

    def main(self, path: Path, write) -> None:
        """Rank 0 runs `write` (of `path`)."""
        self.agree(_attempt(path, write) if dist.is_main() else None)

    def every(self, path: Path, write) -> None:
        """Every rank runs `write` (of `path`)."""
        self.agree(_attempt(path, write))

    def agree(self, failure: str | None, sizes: dict | None = None) -> dict:
        """Every rank's failure and `sizes` (a collective); returns every rank's `sizes` merged."""
        everyone = dist.all_gather_object((failure, sizes or {}))
        failed = next((f for f, _ in everyone if f), None)
        if failed:
            if dist.is_main():
                shutil.rmtree(self.tmp, ignore_errors=True)
            intact = latest(self.out_dir)
            raise CheckpointError(f"checkpoint step {self.step}: {failed}; earlier checkpoints are intact: "
                                  + (str(intact) if intact else "(none: this was the run's first checkpoint)"))
        return {rel: size for _, mine in everyone for rel, size in mine.items()}

    def seal(self, model: str) -> None:
        """manifest.json, written last: the size and SHA-256 of every file (each rank measures the ones it wrote)
        and the model directory the run was started from (config key `model`, for checkpoint.check_resume)."""
        rank, mine = dist.rank(), {}
        for f in self.tmp.rglob("*"):
            rel = f.relative_to(self.tmp).as_posix()
            if f.is_file() and owner(rel) == rank:
                mine[rel] = (f.stat().st_size, sha256(f))
        made = self.agree(None, mine)
        record = {"step": self.step, "model": str(Path(model).absolute()) if model else "",
                  "files": {rel: size for rel, (size, _) in sorted(made.items())},
                  "sha256": {rel: digest for rel, (_, digest) in sorted(made.items())}}
        path = self.tmp / MANIFEST
        self.main(path, lambda: path.write_text(json.dumps(record, indent=1)))


# -- reading: is a checkpoint whole ----------------------------------------------------------------------------

def read(ckpt: Path) -> dict:
    """The checkpoint's manifest.json ({} when it has none or it cannot be read: `problem` says which)."""
    try:
        got = files.loads((Path(ckpt) / MANIFEST).read_bytes())
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def problem(ckpt: Path, hashed=None, unverified: bool = False) -> str:
    """Why checkpoint directory `ckpt` cannot be resumed from, or "" when it is complete: no manifest (nothing to
    verify it by), a manifest that does not size and hash every file, a file missing, added or of another size than
    its manifest says (truncated), or, for the files `hashed(rel)` picks, bytes whose SHA-256 is not the one saved
    (changed in place). `unverified` (config key `resume_without_manifest`) takes a checkpoint with no manifest, or
    one without SHA-256, as it is: complete when its trainer_state.pt is there (and the sizes it lists match)."""
    if not (ckpt / MANIFEST).is_file():
        if not (ckpt / "trainer_state.pt").is_file():
            return f"no trainer_state.pt (and no {MANIFEST})"
        return "" if unverified else (f"no {MANIFEST}, so none of its files can be verified (resume_without_manifest"
                                      "=true takes it as it is, unverified)")
    record = read(ckpt)
    sizes, digests = record.get("files"), record.get("sha256")
    if not record:
        return f"{MANIFEST} is unreadable"
    if not isinstance(sizes, dict) or "trainer_state.pt" not in sizes:
        return f"{MANIFEST} does not list the checkpoint's files"
    if not unverified and (not isinstance(digests, dict) or set(digests) != set(sizes)):
        unhashed = sorted(set(sizes) - set(digests)) if isinstance(digests, dict) else ["any file"]
        return (f"{MANIFEST} does not hash every file it lists (not {', '.join(unhashed[:3]) or 'the same files'}), "
                "so they cannot be verified (resume_without_manifest=true takes it as it is, unverified)")
    for rel, size in sizes.items():
        f = ckpt / rel
        if not f.is_file():
            return f"{rel} is missing"
        got = f.stat().st_size
        if got != size:
            return f"{rel} is {got} bytes, {size} when saved ({'truncated' if got < size else 'changed'})"
    added = sorted(f.relative_to(ckpt).as_posix() for f in ckpt.rglob("*") if f.is_file()
                   and f.relative_to(ckpt).as_posix() not in sizes and f.name != MANIFEST)
    if added:
        return f"{added[0]} is not a file it was saved with (added since: the manifest does not list it)"
    for rel, digest in digests.items() if hashed and isinstance(digests, dict) else ():
        if rel in sizes and hashed(rel) and sha256(ckpt / rel) != digest:
            return f"{rel} is not the file that was saved (its SHA-256 differs from the manifest's: bytes changed)"
    return ""


def latest(out_dir: str) -> Path | None:
    """The newest complete checkpoint directory (sizes checked), or None. `verified` checks the contents too (what
    resume reads)."""
    root = Path(out_dir) / "checkpoints"
    return next((p for p in sorted(root.glob("step_*"), reverse=True) if p.is_dir() and not problem(p)), None)


def verified(out_dir: str, unverified: bool = False) -> Path | None:
    """The newest checkpoint whose every file has its saved size and SHA-256 (a collective: each rank hashes its
    own share, rank 0 the files of ranks this run does not have), or None; each newer one is named, skipped.
    `unverified`: see `problem`."""
    root = Path(out_dir) / "checkpoints"
    found = sorted((p for p in root.glob("step_*") if p.is_dir()), reverse=True) if dist.is_main() else []
    rank, world = dist.rank(), dist.world_size()
    for p in map(Path, dist.broadcast_object([str(p) for p in found])):  # rank 0's listing: one list everywhere
        mine = problem(p, lambda rel: owner(rel) % world == rank, unverified)
        why = next((w for w in dist.all_gather_object(mine) if w), "")
        if not why:
            return p
        dist.print0(f"warning: checkpoint {p} is damaged: {why}; it is skipped and the run resumes from the "
                    "checkpoint before it (kept: a save of its step moves it to checkpoints/replaced/)", file=sys.stderr)
    return None
