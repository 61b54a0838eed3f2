"""Local backend: one warm runner per slot inside bubblewrap namespaces.

Per slot: `bwrap` (no network, read-only system dirs, private /tmp and /dev without ptys, new pid/ipc/uts
namespaces, new session, dies with its parent) runs `runner.py serve UID`; the runner forks every
execution as the slot's own non-root uid with rlimits (see runner.py). Different slots use different
uids, so RLIMIT_NPROC and file permissions separate them too.
"""
import asyncio
import itertools
import json
import os
import secrets
import shutil
import socket
import struct
import tempfile

from .types import RUNNER_FILES, ExecResult, ExecSpec, InfraError, Overloaded

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "runner.py")
# Untrusted code never runs as root (RLIMIT_NPROC ignores root). Each slot of each process gets its own
# uid, so slots and pools (e.g. one per training rank) never share a process budget or kill each other.
BASE_UID = 100000
_claim = {"pid": None, "block": None, "sock": None}


def _uid_block() -> int:
    """This process's block of 256 uids, chosen at random (a uid says nothing of the trainer's pid) and
    claimed on the machine by binding an abstract unix socket named after it: the kernel keeps the name unique
    and frees it when the process ends. A forked child claims its own."""
    if _claim["pid"] != os.getpid():
        while True:
            block = secrets.randbelow(1 << 22)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                sock.bind(f"\0nanogrpo-uids-{block}")
            except OSError:  # taken by another process
                sock.close()
                continue
            _claim.update(pid=os.getpid(), block=block, sock=sock)
            break
    return _claim["block"]


def slot_uid(slot: int) -> int:
    if not 0 <= slot < 256:
        raise ValueError(f"local sandbox supports at most 256 slots per process, got slot {slot}")
    return BASE_UID + _uid_block() * 256 + slot
_ids = itertools.count()
# System paths the programs need (interpreters, compilers, shared libraries), all read-only.
SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/lib32", "/lib64", "/sbin")
ETC_FILES = ("/etc/alternatives", "/etc/ssl", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
             "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf")


def bwrap_available() -> bool:
    return shutil.which("bwrap") is not None


def bwrap_argv(tmp_mb: int, sources: dict[str, int]) -> list[str]:
    """sources: RUNNER_FILES name -> an open fd of it. They are copied into the sandbox, not bind-mounted: a
    bind mount's source path (this checkout's) would show in every program's /proc/self/mountinfo."""
    argv = ["bwrap", "--perms", "0755", "--dir", "/etc"]
    for d in SYSTEM_DIRS + ETC_FILES:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.exists(d):
            argv += ["--ro-bind", d, d]
    argv += ["--perms", "0755", "--dir", "/sandbox"]
    for name, fd in sources.items():
        argv += ["--perms", "0444", "--file", str(fd), f"/sandbox/{name}"]
    # No ptys: bwrap's devpts counts against the machine's pool (one execution held all 3,071 of it, and a
    # program on another slot read a number from how many were left); an empty read-only /dev/pts hides it.
    argv += ["--dev", "/dev", "--tmpfs", "/dev/pts", "--remount-ro", "/dev/pts"]
    argv += ["--proc", "/proc", "--size", str(tmp_mb << 20), "--tmpfs", "/tmp",
             "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
             "--die-with-parent", "--new-session", "--clearenv", "--setenv", "NANOGRPO_PIDNS", "1",
             "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8", "--setenv", "LC_ALL", "C.UTF-8"]
    if os.geteuid() == 0:
        # Run as real root with only what the runner needs; the untrusted child drops all of it.
        # SYS_ADMIN: each execution's own IPC + mount namespaces and private /dev/shm (confine.py).
        argv += ["--cap-drop", "ALL"]
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_KILL", "CAP_DAC_OVERRIDE", "CAP_FOWNER",
                    "CAP_SYS_ADMIN"):
            argv += ["--cap-add", cap]
    else:
        argv += ["--unshare-user"]
    return argv


class LocalWorker:
    """One slot. isolation: "bwrap" (namespaces) or "none" (rlimits + uid only; must be allowed)."""

    def __init__(self, slot: int, python: str = "/usr/bin/python3", isolation: str = "bwrap",
                 tmp_mb: int = 512):
        self.slot, self.python, self.isolation, self.tmp_mb = slot, python, isolation, tmp_mb
        self.uid = slot_uid(slot) if os.geteuid() == 0 else os.geteuid()
        self.proc: asyncio.subprocess.Process | None = None
        self._tmp: str | None = None
        self._err = None
        self._unread = 0

    async def start(self) -> None:
        self._err = tempfile.TemporaryFile()
        sources, env = {}, None
        if self.isolation == "bwrap":
            sources = {name: os.open(os.path.join(HERE, name), os.O_RDONLY) for name in RUNNER_FILES}
            argv = bwrap_argv(self.tmp_mb, sources) + [self.python, "-I", "/sandbox/runner.py", "serve", str(self.uid)]
        elif self.isolation == "none":
            self._tmp = tempfile.mkdtemp(prefix="nanogrpo-sbx-")
            os.chmod(self._tmp, 0o755)
            argv = [self.python, "-I", RUNNER, "serve", str(self.uid)]
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                   "NANOGRPO_JOBS_ROOT": os.path.join(self._tmp, "jobs")}
        else:
            raise ValueError(f"unknown isolation {self.isolation!r} (expected 'bwrap' or 'none')")
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=self._err,
                env=env, limit=1 << 30, pass_fds=list(sources.values()))
        except OSError as e:
            raise InfraError(f"could not start sandbox slot {self.slot}: {e}") from e
        finally:
            for fd in sources.values():
                os.close(fd)

    async def _send(self, req: dict) -> None:
        if self.proc is None or self.proc.returncode is not None:
            raise InfraError(f"sandbox slot {self.slot} is not running{self._stderr_tail()}")
        data = json.dumps(req).encode()
        try:
            self.proc.stdin.write(struct.pack("<I", len(data)) + data)
            await self.proc.stdin.drain()
        except OSError as e:
            raise InfraError(f"sandbox slot {self.slot} died: {e!r}{self._stderr_tail()}") from e

    async def _reply(self) -> dict:
        try:
            head = await self.proc.stdout.readexactly(4)
            body = await self.proc.stdout.readexactly(struct.unpack("<I", head)[0])
        except (OSError, asyncio.IncompleteReadError) as e:
            raise InfraError(f"sandbox slot {self.slot} died: {e!r}{self._stderr_tail()}") from e
        rep = json.loads(body)
        if "infra_error" in rep:
            raise (Overloaded if rep.get("overloaded") else InfraError)(rep["infra_error"])
        return rep

    async def _call(self, req: dict) -> dict:
        await self._send(req)
        while self._unread:  # replies to pipelined end_job requests come first
            self._unread -= 1
            await self._reply()
        return await self._reply()

    def _stderr_tail(self) -> str:
        if self._err is None:
            return ""
        self._err.seek(0)
        tail = self._err.read()[-2000:].decode("utf-8", "replace").strip()
        return f": {tail}" if tail else ""

    async def probe(self) -> dict:
        return await self._call({"op": "probe"})

    def new_job(self) -> str:
        return f"j{next(_ids)}"  # unique within the slot's own /tmp; nothing of the host in it

    async def exec(self, job: str, spec: ExecSpec) -> ExecResult:
        return ExecResult(**await self._call(spec.request(job)))

    async def end_job(self, job: str) -> None:
        # Pipelined: the runner cleans up while the next request is on its way; its reply (or its
        # failure, as an InfraError) is read by the next call.
        await self._send({"op": "end", "job": job})
        self._unread += 1

    async def close(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            try:
                self.proc.stdin.close()
                await asyncio.wait_for(self.proc.wait(), 2)
            except (asyncio.TimeoutError, OSError):
                self.proc.kill()
                await self.proc.wait()
        self.proc = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
        if self._err is not None:
            self._err.close()
            self._err = None
