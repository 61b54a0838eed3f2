"""Process-group set-up for one code path from 1 process to N GPUs, and the FSDP2 plumbing of an update.

Under torchrun the usual env vars are set and we join that group (NCCL on GPU, gloo on CPU). Alone,
we still create a one-rank gloo group so FSDP2 and every collective run the same code; at world size
1 the collectives are cheap no-ops.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from pathlib import Path
from typing import NamedTuple

import torch
import torch.distributed as dist

from nanogrpo import files


class Split(NamedTuple):
    """Split placement (`sampler_ranks`): torchrun's ranks [0, trainers) train, [trainers, world) only sample."""

    rank: int  # torchrun's rank; rank() is the rank within this process's own side
    trainers: int
    samplers: int
    to_samplers: dist.ProcessGroup  # weights, trainer side -> sampler side (all torchrun ranks, gloo)
    to_trainers: dist.ProcessGroup  # rollouts and evaluations, sampler side -> trainer side

    @property
    def sampler(self) -> bool:
        return self.rank >= self.trainers


SPLIT: Split | None = None  # set by init(sampler_ranks > 0)


def init(device: str = "auto", cpu_allocator: str = "system", sampler_ranks: int = 0) -> torch.device:
    """Join (or create) the process group and return this rank's device. cpu_allocator (CPU runs only):
    "hugepages" (`huge_pages`), "reuse" (`keep_freed_memory`) or "system" (glibc's default). sampler_ranks > 0: the
    default group is this process's side only, so the trainer's collectives run among the trainer ranks as at any
    world size; the two sides talk over two more gloo groups of every rank (SPLIT, nanogrpo/placement.py)."""
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if not use_cuda and cpu_allocator == "hugepages" and not huge_pages():
        print("warning: cpu_allocator=hugepages had no effect (transparent huge pages off, or a large tensor was "
              "allocated before dist.init); every large tensor is faulted in 4 KiB at a time", flush=True)
    if not use_cuda and cpu_allocator == "reuse":
        keep_freed_memory()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        # on GPU, small CPU tensors (token counts, metrics) still all-reduce: gloo for those, NCCL for CUDA
        backend = "cpu:gloo,cuda:nccl" if use_cuda else "gloo"
        if sampler_ranks:
            _init_split(backend, sampler_ranks, torch.device("cuda", local_rank) if use_cuda else None)
        elif "RANK" in os.environ:
            store = loopback_store()  # one node: on 127.0.0.1 (None: more nodes, torchrun's store)
            dist.init_process_group(backend, device_id=torch.device("cuda", local_rank) if use_cuda else None,
                                    **({"store": store, "rank": int(os.environ["RANK"]),
                                        "world_size": int(os.environ["WORLD_SIZE"])} if store else {}))
        else:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")


def _init_split(backend: str, samplers: int, device_id) -> None:
    """The two sides' own default groups and the two groups between them, on torchrun's store (prefixed apart)."""
    global SPLIT
    store = loopback_store()  # one node: on 127.0.0.1 (None: more nodes, torchrun's store)
    store, rank, world = ((store, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])) if store
                          else next(dist.rendezvous("env://")))
    trainers = world - samplers
    side, mine, size = ("samplers", rank - trainers, samplers) if rank >= trainers else ("trainers", rank, trainers)
    dist.init_process_group(backend, store=dist.PrefixStore(side, store), rank=mine, world_size=size,
                            device_id=device_id)
    bridge = lambda name: dist.ProcessGroupGloo(dist.PrefixStore(name, store), rank, world)  # noqa: E731
    SPLIT = Split(rank, trainers, samplers, bridge("to_samplers"), bridge("to_trainers"))


def loopback_store() -> dist.Store | None:
    """A job on one node (torchrun's LOCAL_WORLD_SIZE = WORLD_SIZE): the store every process group meets on, a
    TCPStore of rank 0's on 127.0.0.1 only, behind a SignedStore, with gloo's and NCCL's sockets on loopback and its
    port passed through torchrun's store, signed too. None on more nodes: torchrun's store, as env:// has it. How,
    why, and what stays open: docs/sandbox.md, "Trust boundaries"."""
    import socket
    from datetime import timedelta

    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    if int(os.environ.get("LOCAL_WORLD_SIZE", -1)) != world:
        return None
    if "lo" in {name for _, name in socket.if_nameindex()}:
        for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            os.environ.setdefault(var, "lo")
    shared = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"  # torchrun's store serves the workers
    agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False,
                          timedelta(minutes=10)) if shared else None
    run = f"{os.environ.get('TORCHELASTIC_RUN_ID', '')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', 0)}"
    key = f"nanogrpo/loopback_store/{run}"
    if rank == 0:
        token = run_token(run, create=True)  # before any rank can connect: they read it once connected
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0 if shared else int(os.environ["MASTER_PORT"])))
        listener.listen(world * 4)
        port = listener.getsockname()[1]
        store = dist.TCPStore("127.0.0.1", port, world, True, wait_for_workers=False,
                              master_listen_fd=listener.detach())  # the store owns the socket now
        if agent is not None:
            SignedStore(agent, token).set(key, str(port))
        return _keep(SignedStore(store, token))
    if agent is not None:
        agent.wait([key])  # rank 0 wrote the token before it set the port
        token = run_token(run)
        port = int(SignedStore(agent, token).get(key))
    else:
        port = int(os.environ["MASTER_PORT"])
    store = dist.TCPStore("127.0.0.1", port, world, False)  # connected: rank 0 wrote the token before it listened
    return _keep(SignedStore(store, token if agent is not None else run_token(run)))


TOKEN_FILE: Path | None = None  # rank 0's token file, removed by close()
STORES: list = []  # the SignedStores of the process groups: torch holds the C++ half only, the Python half lives here


def _keep(store):
    STORES.append(store)
    return store


def run_token(run: str, create: bool = False) -> bytes:
    """The run's secret (32 random bytes), from rank 0 to the other ranks of one node through a file only this
    user can read: $TMPDIR/nanogrpo-UID/ (mode 0700, checked) / store-MASTER_PORT-RUN.token (mode 0600).
    `create` (rank 0): a new one, written whole (over a stale one of an earlier run) and removed by close()."""
    import secrets
    import stat
    import tempfile

    home = Path(tempfile.gettempdir()) / f"nanogrpo-{os.getuid()}"
    home.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(home)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise StoreError(f"{home} is not a directory of this user's only (mode 0700): the run's store token is not "
                         "kept there; remove it, or set TMPDIR to a directory of your own")
    path = home / f"store-{os.environ['MASTER_PORT']}-{run.replace('/', '-')}.token"
    if not create:
        return path.read_bytes()
    global TOKEN_FILE
    token, tmp = secrets.token_bytes(32), path.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(token)
    os.replace(tmp, path)
    TOKEN_FILE = path
    return token


class StoreError(RuntimeError):
    """A value in the run's store that no rank of this run set (or the token cannot be kept private)."""


class SignedStore(dist.Store):
    """A store whose every value carries an HMAC-SHA256 of its key and value under the run's token (`run_token`),
    checked at every get: a value no rank of this run set is refused with StoreError, never read. Counters (`add`,
    barriers) are not signed (docs/sandbox.md, "Trust boundaries", says what that leaves)."""

    def __init__(self, store: dist.Store, token: bytes):
        super().__init__()
        self.store, self.token = store, token
        dist.Store.set_timeout(self, store.timeout)

    def _mac(self, key: str, value: bytes) -> bytes:
        return hmac.new(self.token, key.encode() + b"\0" + value, hashlib.sha256).digest()

    def set(self, key, value) -> None:
        value = value.encode() if isinstance(value, str) else bytes(value)
        self.store.set(key, self._mac(key, value) + value)

    def get(self, key) -> bytes:
        raw = self.store.get(key)
        value = raw[32:]
        if len(raw) < 32 or not hmac.compare_digest(raw[:32], self._mac(key, value)):
            raise StoreError(f"the run's store holds a value for {key!r} that no rank of this run set (its signature "
                             "does not match the run's token): a process that is not a rank wrote it; the run stops "
                             "rather than read it (docs/sandbox.md, \"Trust boundaries\")")
        return value

    def add(self, key, amount) -> int:
        return self.store.add(key, amount)

    def check(self, keys) -> bool:
        return self.store.check(keys)

    def wait(self, keys, timeout=None) -> None:
        self.store.wait(keys) if timeout is None else self.store.wait(keys, timeout)

    def delete_key(self, key) -> bool:
        return self.store.delete_key(key)

    def num_keys(self) -> int:
        return self.store.num_keys()


def huge_pages() -> bool:
    """Back every CPU tensor of 2 MiB or more with transparent huge pages (torch's THP_MEM_ALLOC_ENABLE): 512x fewer
    page faults than glibc's fresh mmap, and freed memory still goes back to the OS (docs/throughput.md). torch reads
    the variable at its first allocation of 2 MiB or more, so this runs before any: True when a probe allocation was
    faulted in as huge pages. The variable is then removed (unless the user set it): children would inherit it."""
    import resource

    ours = "THP_MEM_ALLOC_ENABLE" not in os.environ
    os.environ["THP_MEM_ALLOC_ENABLE"] = "1"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.empty(4 << 20).fill_(0)  # 16 MiB: 4,096 faults of 4 KiB; measured about 520 with huge pages
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    if ours:
        del os.environ["THP_MEM_ALLOC_ENABLE"]
    return faults < 2048


def keep_freed_memory() -> bool:
    """Make glibc's malloc keep freed memory for the next allocation instead of returning it to the OS (mmap and
    trimming off): no page faults into fresh tensors, at the cost of a higher peak RSS (docs/throughput.md).
    Process-wide, from this call on; glibc only (returns False and changes nothing elsewhere)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # <malloc.h>
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))


def close() -> None:
    """Leave the process group, then give gloo's worker threads the GIL for a moment before the interpreter exits.

    Why the pause: a gloo worker dropping its reference to a finished collective may need the GIL, and
    destroy_process_group does not join it while a model still holds the group. If the main thread reaches
    interpreter shutdown first, the worker exits inside a C++ destructor and the process aborts ("terminate called
    without an active exception": 3 runs in ~70 of a 2-rank FSDP2 script under torchrun, 0 in 140 with the pause).
    Sleeping releases the GIL; paid once per process, also when the group is already gone (vLLM's shutdown)."""
    global SPLIT, TOKEN_FILE
    if dist.is_initialized():
        dist.destroy_process_group()
    SPLIT = None
    if TOKEN_FILE is not None:  # rank 0's: every rank read it at the start
        TOKEN_FILE.unlink(missing_ok=True)
        TOKEN_FILE = None
    STORES.clear()
    time.sleep(0.1)


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def is_main() -> bool:
    return rank() == 0


def print0(*args, **kwargs) -> None:
    """print on rank 0, flushed; a full disk under a redirected log is named (files.echo)."""
    if is_main():
        files.echo(*args, **kwargs)


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


def all_reduce(t: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """In-place all-reduce (sum | max | min); a no-op at world size 1."""
    if world_size() > 1:
        dist.all_reduce(t, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op])
    return t


def all_gather_object(obj) -> list:
    """Every rank's `obj`, in rank order."""
    if world_size() == 1:
        return [obj]
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast(t: torch.Tensor, src: int = 0) -> torch.Tensor:
    """In place: every rank gets rank `src`'s values; a no-op at world size 1."""
    if world_size() > 1:
        dist.broadcast(t, src=src)
    return t


def broadcast_object(obj, src: int = 0):
    if world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def even_out(items: list, filler) -> list:
    """`items`, then `filler()`s until this rank holds as many as the rank with the most: each micro-batch of an
    update runs FSDP collectives, so every rank must run as many (a filler must add nothing to the update)."""
    most = int(all_reduce(torch.tensor([len(items)], dtype=torch.float64), "max").item())
    return items + [filler() for _ in range(most - len(items))]


def syncing_grads(policy, batches: list, grad_accumulation: str):
    """(i, micro-batch) of an update pass, FSDP's gradient sync set for each: `sharded` reduce-scatters after every
    one, so no GPU ever holds the whole model's fp32 gradients; `unsharded` after the last one only."""
    for i, b in enumerate(batches):
        policy.set_requires_gradient_sync(i == len(batches) - 1 or grad_accumulation == "sharded")
        yield i, b


def finish_grads(policy, grad_clip: float) -> float:
    """The gradient norm over every rank, before clipping to grad_clip (when > 0). A parameter left without a gradient
    (nothing trained on any rank) gets zeros: AdamW's moments and step count move as when every completion ran."""
    for q in policy.parameters():
        if q.grad is None and q.requires_grad:
            q.grad = torch.zeros_like(q)
    norm = (torch.nn.utils.clip_grad_norm_(policy.parameters(), grad_clip) if grad_clip > 0
            else torch.nn.utils.get_total_norm([q.grad for q in policy.parameters() if q.grad is not None]))
    return norm.full_tensor().item() if hasattr(norm, "full_tensor") else float(norm)  # sharded: a DTensor
