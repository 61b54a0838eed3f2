"""The asyncio pool: bounded concurrency over warm sandbox workers, retries, a synchronous front door.

Async lives here and nowhere else: `SandboxPool.map(fn, items)` is an ordinary blocking call for the
training loop. Each item is handled by `fn(session, item)` on one worker (a slot), so a compiled C++
binary and the tests that use it stay together. An InfraError anywhere recycles the worker and
retries the item with backoff; if it persists the item's result is `None`.
"""
import asyncio
import atexit
import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from .types import InfraError, Overloaded, SandboxUnavailable

log = logging.getLogger(__name__)


class Session:
    """One item's view of a worker: its own job directory, cleaned up at the end."""

    def __init__(self, worker, job: str):
        self.worker, self.job = worker, job

    async def exec(self, spec):
        return await self.worker.exec(self.job, spec)


class SandboxPool:
    def __init__(self, backend: str = "local", concurrency: int | None = None, retries: int = 2,
                 backoff_s: float = 0.5, allow_unsandboxed: bool = False, **backend_opts):
        self.backend, self.retries, self.backoff_s = backend, retries, backoff_s
        self.concurrency = concurrency or os.cpu_count() or 1
        self.allow_unsandboxed = allow_unsandboxed
        self.backend_opts = backend_opts
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._free: asyncio.Queue | None = None
        self._started = self._closed = False
        self.isolation = None  # what the start-up probe found

    # -- workers ---------------------------------------------------------------------------
    def _make_worker(self, slot: int):
        if self.backend == "local":
            from .local import LocalWorker, bwrap_available

            opts = dict(self.backend_opts)
            if opts.get("isolation") is None:
                opts["isolation"] = "bwrap" if bwrap_available() else "none"
            return LocalWorker(slot, **opts)
        if self.backend == "e2b":
            from .e2b import E2BWorker

            return E2BWorker(slot, **self.backend_opts)
        raise ValueError(f"unknown sandbox backend {self.backend!r} (expected 'local' or 'e2b')")

    async def _new_worker(self, slot: int):
        w = self._make_worker(slot)
        await w.start()
        return w

    async def _start(self):
        if self._started:
            return
        first = await self._new_worker(0)
        try:
            facts = await first.probe()
            self._check_isolation(first, facts)
        except (InfraError, SandboxUnavailable):
            await first.close()
            raise
        self.isolation = facts
        rest = await asyncio.gather(*[self._new_worker(i) for i in range(1, self.concurrency)],
                                    return_exceptions=True)
        for i, w in enumerate(rest, 1):
            if isinstance(w, BaseException):  # a slot that failed to start is retried on first use
                log.warning("sandbox slot %d failed to start: %s", i, w)
                rest[i - 1] = self._make_worker(i)
        self._free = asyncio.Queue()
        for w in [first, *rest]:
            self._free.put_nowait(w)
        self._started = True

    def _check_isolation(self, worker, facts: dict):
        problems = []
        if getattr(worker, "isolation", "remote") == "none":
            problems.append("no namespace isolation (bubblewrap missing or disabled)")
        if facts.get("uid") == 0:
            problems.append("untrusted code would run as root")
        if facts.get("root_writable"):
            problems.append("the system directories are writable")
        if facts.get("network"):
            problems.append("the network is reachable")
        if not problems:
            return
        msg = "SANDBOX ISOLATION IS NOT ACTIVE: " + "; ".join(problems)
        if not self.allow_unsandboxed:
            raise SandboxUnavailable(msg + ". Install bubblewrap (apt-get install bubblewrap) or pass "
                                     "allow_unsandboxed=True to run untrusted code anyway.")
        print("!" * 80 + f"\n{msg}\nRUNNING UNTRUSTED CODE WITHOUT ISOLATION (allow_unsandboxed=True)\n"
              + "!" * 80, file=sys.stderr, flush=True)

    async def _recycle(self, worker):
        try:
            await worker.close()
        except Exception:  # noqa: BLE001  a dead worker may fail to close; it is replaced anyway
            pass
        try:
            return await self._new_worker(worker.slot)
        except InfraError as e:
            log.warning("sandbox slot %d failed to restart: %s", worker.slot, e)
            return self._make_worker(worker.slot)  # not started: its next use raises InfraError again

    # -- running ---------------------------------------------------------------------------
    async def _run_one(self, fn, item):
        for attempt in range(self.retries + 1):
            worker = await self._free.get()
            try:
                job = worker.new_job()
                try:
                    return await fn(Session(worker, job), item)
                finally:
                    await worker.end_job(job)
            except Overloaded as e:  # the worker is fine; retrying under the same load would cost as much again
                log.warning("sandbox: %s; reward None", e)
                return None
            except InfraError as e:
                log.warning("sandbox infrastructure error (attempt %d/%d): %s", attempt + 1,
                            self.retries + 1, e)
                worker = await self._recycle(worker)
                if attempt < self.retries:
                    await asyncio.sleep(self.backoff_s * 2**attempt)
            except Exception:  # noqa: BLE001  a judge bug must not crash training: loud, then None
                log.exception("sandbox judge failed on an item; its reward is None")
                return None
            finally:
                self._free.put_nowait(worker)
        return None

    async def amap(self, fn, items):
        try:
            await self._start()
        except InfraError as e:  # the sandbox could not start: every reward is None (retried next call)
            log.error("sandbox pool could not start: %s", e)
            return [None] * len(items)
        return await asyncio.gather(*[self._run_one(fn, it) for it in items])

    def map(self, fn, items: list) -> list:
        """Blocking: [await fn(session, item) for item in items] over the pool; None on infra failure.

        Safe to call from several threads (calls are serialised) and from inside a running event loop
        (the pool's own loop then runs in a helper thread)."""
        if self._closed:
            raise RuntimeError("sandbox pool is closed")
        with self._lock:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return self._loop.run_until_complete(self.amap(fn, list(items)))
            with ThreadPoolExecutor(1) as ex:
                return ex.submit(self._loop.run_until_complete, self.amap(fn, list(items))).result()

    def start(self) -> "SandboxPool":
        """Start the workers now and check isolation (raises SandboxUnavailable or InfraError)."""
        with self._lock:
            self._loop.run_until_complete(self._start())
        return self

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._started:
            workers = [self._free.get_nowait() for _ in range(self._free.qsize())]

            async def close_all():
                await asyncio.gather(*[w.close() for w in workers], return_exceptions=True)

            self._loop.run_until_complete(close_all())
        self._loop.close()


_default: dict[tuple, SandboxPool] = {}


def get_pool(backend: str = "local", concurrency: int | None = None, **opts) -> SandboxPool:
    """The process-wide pool for these options (started on first use, closed at exit)."""
    key = (backend, concurrency, tuple(sorted(opts.items())))
    if key not in _default:
        _default[key] = pool = SandboxPool(backend, concurrency, **opts)
        atexit.register(pool.close)
    return _default[key]
