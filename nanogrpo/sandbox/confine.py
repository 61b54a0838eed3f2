"""Per-execution confinement, applied by runner.py in the forked child before it drops to the untrusted uid
(stdlib only: it runs inside the sandbox next to runner.py).

The slot's bwrap namespaces live as long as the slot; these live as long as one execution: fresh IPC, mount and
pid namespaces, a private size-capped /dev/shm, SysV limits, and its own /proc (what each keeps from the next
execution: docs/sandbox.md, "per execution"). The system-call filters are in seccomp.py.
"""
import ctypes
import errno
import os

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _sysctl(name, value):
    with open(f"/proc/sys/kernel/{name}", "w") as f:
        f.write(f"{value}\n")


def new_namespaces(shm_mb: int) -> None:
    """Own IPC + mount + pid namespaces, a private /dev/shm of shm_mb, SysV capped at shm_mb (needs
    CAP_SYS_ADMIN). The caller stays in its pid namespace: its next child is pid 1 of the new one."""
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID), "unshare(ipc, mount, pid)")
    _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make mounts private")
    os.makedirs("/dev/shm", exist_ok=True)
    opts = f"size={shm_mb}m,nr_inodes=4096,mode=1777".encode()
    _check(_libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, opts), "mount /dev/shm")
    # IPC sysctls are per IPC namespace: these apply to this execution only.
    _sysctl("shmmax", shm_mb << 20)
    _sysctl("shmall", (shm_mb << 20) // os.sysconf("SC_PAGE_SIZE"))
    _sysctl("shmmni", 64)
    _sysctl("msgmni", 16)   # 16 queues x msgmnb (16 KB default) of message memory
    _sysctl("sem", "250 4096 32 32")  # per set, total, ops per call, sets


def mount_proc() -> None:
    """A /proc of this process's own pid namespace over the slot's, in the execution's mount namespace (from
    inside that pid namespace, before dropping privileges; the program cannot unmount it, and unmounting the
    slot's first would wait for an RCU grace period). subset=pid: no machine-wide files (Linux 5.8+; older
    kernels still show them); hidepid: only the program's own processes, not pid 1."""
    for opts in (b"subset=pid,hidepid=invisible", b"hidepid=2"):
        if _libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) == 0:
            return
        if ctypes.get_errno() != errno.EINVAL:
            break
    _check(-1, "mount /proc")


# -- the wall-clock backstop under load ---------------------------------------------------------
SCHED_BATCH, SCHED_IDLE = 3, 5


def program_sched(uid: int, exclude=(), base_nice: int = 0) -> dict:
    """How the program fared over its life so far (/proc/PID/status, stat, task/TID/schedstat): CPU time of its
    live threads and of its processes that ended (reaped by their parent, or by the execution's pid 1); the
    longest any one thread was runnable (its CPU time plus its run delay, the time it waited for a CPU); and
    whether any lowered its own priority (nice above the runner's, SCHED_BATCH / SCHED_IDLE): such a program
    starves itself on purpose; and how many of its threads are still alive."""
    got = {"cpu": 0.0, "longest": 0.0, "lowered": False, "threads": 0}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in exclude:
            continue
        try:
            with open(f"/proc/{pid}/status") as f:  # the real uid (the /proc/PID owner is root when not dumpable)
                status = {key: value.split() for key, _, value in (line.partition(":") for line in f)}
            init = len(status.get("NSpid", ())) > 1 and status["NSpid"][-1] == "1"  # an execution's pid 1
            if int(status["Uid"][0]) != uid and not init:
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
            got["cpu"] += (int(fields[13]) + int(fields[14])) / tick  # cutime + cstime: its ended children
            for tid in [] if init else os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    run_ns, wait_ns, _ = f.read().split()
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                got["cpu"] += int(run_ns) / 1e9
                got["threads"] += 1
                got["longest"] = max(got["longest"], (int(run_ns) + int(wait_ns)) / 1e9)
                got["lowered"] |= int(fields[16]) > base_nice or int(fields[38]) in (SCHED_BATCH, SCHED_IDLE)
        except (OSError, ValueError, IndexError, KeyError):  # the process ended while we looked
            continue
    return got
