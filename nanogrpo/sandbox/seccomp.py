"""System-call filters for untrusted programs (stdlib only: runs inside the sandbox next to runner.py).

Two classic-BPF filters, x86_64 and aarch64 only (elsewhere: none, see docs/sandbox.md):

- the deny filter (`seccomp_program`, installed by the program's process itself just before it execs): the
  RULES' calls fail with an errno; every other call runs. Not an allow-list.
- the budget (`Budget`, installed by the execution's supervisor before it forks the program): every pipe and
  socket the execution creates is counted by the supervisor (SECCOMP_RET_USER_NOTIF), which lets it through or
  answers EMFILE; with the per-object caps this bounds the kernel buffers an execution can fill.
What each refuses and why: docs/sandbox.md, "per execution" and "system-call filter".
"""
import ctypes
import errno
import fcntl
import platform
import struct

# audit arch, and the numbers of the calls below (a call an architecture lacks is simply absent)
_ABI = {
    "x86_64": (0xC000003E, dict(
        add_key=248, request_key=249, keyctl=250, memfd_create=319, memfd_secret=447, unshare=272, clone=56,
        clone3=435, setns=308, flock=73, inotify_init=253, inotify_init1=294, fanotify_init=300, fcntl=72,
        mknod=133, mknodat=259, vmsplice=278, splice=275, tee=276, sendfile=40, io_uring_setup=425, socket=41,
        socketpair=53, setsockopt=54, pipe=22, pipe2=293, seccomp=317)),
    "aarch64": (0xC00000B7, dict(
        add_key=217, request_key=218, keyctl=219, memfd_create=279, memfd_secret=447, unshare=97, clone=220,
        clone3=435, setns=268, flock=32, inotify_init1=26, fanotify_init=262, fcntl=25, mknodat=33, vmsplice=75,
        splice=76, tee=77, sendfile=71, io_uring_setup=425, socket=198, socketpair=199, setsockopt=208, pipe2=59,
        seccomp=277)),
}
_X32 = 0x40000000  # x86_64's x32 ABI: the same calls under other numbers; refused wholesale

NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
CLONE_NEWTIME = 0x80  # unshare only: in clone's flags these bits are the exit signal
F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 5, 6, 7, 36, 37, 38
F_SETLEASE, F_NOTIFY, F_SETPIPE_SZ = 1024, 1026, 1031
PIPE_BYTES = 64 << 10  # a pipe's default size, and its largest here
AF_UNIX, SOL_SOCKET, SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE, SO_RCVBUFFORCE = 1, 1, 7, 8, 32, 33

# (call, errno, clauses): refused when every test of any one clause holds; no clauses: always refused.
# A test is (argument index, op, value) on the argument's low 32 bits (all the arguments tested are ints).
RULES = [
    # memory no rlimit or tmpfs size caps, and a per-uid keyring that outlives executions
    *[(name, errno.EPERM, ()) for name in ("add_key", "request_key", "keyctl", "memfd_create", "memfd_secret")],
    # namespaces: root in a user namespace of its own, a program could mount a tmpfs or make an IPC namespace
    # with the kernel's default SysV limits. clone3 passes its flags in memory, which a filter cannot read:
    # ENOSYS makes the C library fall back to clone (whose flags are checked).
    ("unshare", errno.EPERM, ([(0, "&", NAMESPACES | CLONE_NEWTIME)],)),
    ("clone", errno.EPERM, ([(0, "&", NAMESPACES)],)),
    ("clone3", errno.ENOSYS, ()),
    ("setns", errno.EPERM, ()),
    # the read-only system files are the same inodes in every slot (and on the host): locks, inotify,
    # fanotify and dnotify on them are channels between slots running at once, and show the host's activity
    *[(name, errno.EPERM, ()) for name in ("flock", "inotify_init", "inotify_init1", "fanotify_init")],
    ("fcntl", errno.EPERM, ([(1, "in", (F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW,
                                        F_SETLEASE, F_NOTIFY))],
                            [(1, "in", (F_SETPIPE_SZ,)), (2, ">", PIPE_BYTES)])),
    # a named pipe is a pipe the budget would not count
    *[(name, errno.EPERM, ()) for name in ("mknod", "mknodat")],
    # a pipe or socket holding references to pages (huge pages, page cache) it does not account for;
    # sendfile answers EINVAL, on which Python and libuv fall back to read / write
    *[(name, errno.EPERM, ()) for name in ("vmsplice", "splice", "tee", "io_uring_setup")],
    ("sendfile", errno.EINVAL, ()),
    # sockets: AF_UNIX only (TCP autotunes its buffers to megabytes; vsock reaches a VM's host, which the network
    # namespace does not cover), at the kernel's default buffer size
    *[(name, errno.EAFNOSUPPORT, ([(0, "notin", (AF_UNIX,))],)) for name in ("socket", "socketpair")],
    ("setsockopt", errno.EPERM, ([(1, "in", (SOL_SOCKET,)), (2, "in", (SO_SNDBUF, SO_RCVBUF, SO_SNDBUFFORCE,
                                                                      SO_RCVBUFFORCE))],)),
]

# The calls the budget counts: (what they create, how many it costs). A socket() may later connect, which
# gives it a peer on the listening side: two sockets either way.
COUNTED = {"pipe": ("pipes", 1), "pipe2": ("pipes", 1), "socket": ("sockets", 2), "socketpair": ("sockets", 2)}

LD, JA, JEQ, JGT, JSET, RET = 0x20, 0x05, 0x15, 0x25, 0x45, 0x06
ALLOW, NOTIFY, ERRNO = 0x7FFF0000, 0x7FC00000, 0x00050000


class _Asm:
    """Classic BPF with forward labels."""

    def __init__(self):
        self.ins, self.labels, self._n = [], {}, 0

    def new(self):
        self._n += 1
        return f"L{self._n}"

    def at(self, label):
        self.labels[label] = len(self.ins)

    def op(self, code, k=0, jt=0, jf=0):
        self.ins.append((code, jt, jf, k))

    def bytes(self):
        out = []
        for i, (code, jt, jf, k) in enumerate(self.ins):
            rel = lambda x: self.labels[x] - i - 1 if isinstance(x, str) else x  # noqa: E731
            jt, jf, k = rel(jt), rel(jf), rel(k) if code == JA else k
            assert 0 <= jt < 256 and 0 <= jf < 256, "jump too far for classic BPF"
            out.append(struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF))
        return b"".join(out)


def _arg(i):
    return 16 + 8 * i  # offsetof(struct seccomp_data, args[i]); its low 32 bits on a little-endian machine


def _test(asm, test, fail):
    """Fall through when the test holds, jump to `fail` when it does not."""
    i, op, v = test
    asm.op(LD, _arg(i))
    if op == "&":
        asm.op(JSET, v, 0, fail)
    elif op == ">":
        asm.op(JGT, v, 0, fail)
    else:  # "in" / "notin": a run of equality tests
        hit = asm.new()
        for x in v:
            asm.op(JEQ, x, hit if op == "in" else fail, 0)
        if op == "in":
            asm.op(JA, fail)
        asm.at(hit)


def _header(asm, audit_arch, on_foreign):
    asm.op(LD, 4)                           # A = seccomp_data.arch
    asm.op(JEQ, audit_arch, 1, 0)           # the native ABI: go on
    asm.op(RET, on_foreign)
    asm.op(LD, 0)                           # A = seccomp_data.nr
    asm.op(JGT, _X32 - 1, 0, 1)             # x32 numbers
    asm.op(RET, on_foreign)


def seccomp_program(machine: str | None = None) -> bytes | None:
    """The deny filter: the RULES' calls fail with their errno (any foreign ABI: EPERM), the rest run."""
    abi = _ABI.get(machine or platform.machine())
    if abi is None:
        return None
    audit_arch, nrs = abi
    asm = _Asm()
    _header(asm, audit_arch, ERRNO | errno.EPERM)
    for name, err, clauses in RULES:
        if name not in nrs:
            continue
        nxt = asm.new()
        asm.op(LD, 0)
        asm.op(JEQ, nrs[name], 0, nxt)
        for clause in clauses:
            miss = asm.new()
            for test in clause:
                _test(asm, test, miss)
            asm.op(RET, ERRNO | err)
            asm.at(miss)
        asm.op(RET, ERRNO | err if not clauses else ALLOW)
        asm.at(nxt)
    asm.op(RET, ALLOW)
    return asm.bytes()


def budget_program(machine: str | None = None) -> bytes | None:
    """The budget's filter: the COUNTED calls go to the supervisor; everything else (foreign ABIs included,
    which the deny filter refuses) runs."""
    abi = _ABI.get(machine or platform.machine())
    if abi is None:
        return None
    audit_arch, nrs = abi
    asm = _Asm()
    _header(asm, audit_arch, ALLOW)
    for name in COUNTED:
        if name in nrs:
            asm.op(JEQ, nrs[name], 0, 1)
            asm.op(RET, NOTIFY)
    asm.op(RET, ALLOW)
    return asm.bytes()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER = 1, 8
NOTIF_RECV, NOTIF_SEND, NOTIF_CONTINUE = 0xC0502100, 0xC0182101, 1  # SECCOMP_IOCTL_NOTIF_*, struct sizes 80 / 24


DENY = seccomp_program()  # built once, at import: every execution's process installs it


def install_seccomp() -> bool:
    """Install the deny filter on this process (inherited by its children and across exec). False: no filter
    for this machine."""
    if DENY is None:
        return False
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "no_new_privs")
    fprog = _SockFprog(len(DENY) // 8, DENY)
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp")
    return True


class Budget:
    """Counts the pipes and sockets of one execution. `install` (in the supervisor, before it forks the
    execution's processes) returns None where the kernel or the machine has no user notification (Linux < 5.5):
    then only the per-object caps hold."""

    def __init__(self, fd: int, left: dict, nrs: dict):
        self.fd, self.left = fd, left
        self.cost = {nrs[name]: c for name, c in COUNTED.items() if name in nrs}

    @classmethod
    def install(cls, pipes: int, sockets: int) -> "Budget | None":
        machine = platform.machine()
        prog = budget_program(machine)
        if prog is None:
            return None
        fprog = _SockFprog(len(prog) // 8, prog)
        nrs = _ABI[machine][1]
        fd = _libc.syscall(nrs["seccomp"], SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER,
                           ctypes.byref(fprog))
        if fd < 0:
            if ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS):
                return None
            raise OSError(ctypes.get_errno(), "seccomp user notification")
        return cls(fd, {"pipes": pipes, "sockets": sockets}, nrs)

    def answer(self) -> None:
        """Answer one pending call: let it run if the budget allows, else EMFILE."""
        req = bytearray(80)  # struct seccomp_notif, zeroed as the kernel requires
        try:
            fcntl.ioctl(self.fd, NOTIF_RECV, req, True)
        except OSError:  # the caller died meanwhile
            return
        cid, _, _, nr = struct.unpack_from("<QIIi", req)
        kind, n = self.cost.get(nr, (None, 0))
        if kind is not None and self.left[kind] >= n:
            self.left[kind] -= n
            resp = struct.pack("<QqiI", cid, 0, 0, NOTIF_CONTINUE)
        else:
            resp = struct.pack("<QqiI", cid, 0, -errno.EMFILE, 0)
        try:
            fcntl.ioctl(self.fd, NOTIF_SEND, resp)
        except OSError:  # the caller died meanwhile
            pass
