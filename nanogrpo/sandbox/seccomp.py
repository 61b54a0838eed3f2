"""The system-call filter for untrusted programs (stdlib only: runs inside the sandbox next to runner.py).

A classic-BPF filter (`seccomp_program`), x86_64 and aarch64 only (elsewhere: none, see docs/sandbox.md),
installed by the program's process itself just before it execs: calls that would take memory no limit sees,
open a channel through the files every slot shares, or leave the execution's namespaces fail with an errno;
every other call runs. Not an allow-list.
"""
import ctypes
import errno
import os
import platform
import struct

# audit arch, and the numbers of the calls below (a call an architecture lacks is simply absent)
_ABI = {
    "x86_64": (0xC000003E, dict(
        add_key=248, request_key=249, keyctl=250, memfd_create=319, memfd_secret=447, unshare=272, clone=56,
        clone3=435, setns=308, flock=73, inotify_init=253, inotify_init1=294, fanotify_init=300, fcntl=72,
        mknod=133, mknodat=259, vmsplice=278, splice=275, tee=276, sendfile=40, io_uring_setup=425, socket=41,
        socketpair=53, setsockopt=54)),
    "aarch64": (0xC00000B7, dict(
        add_key=217, request_key=218, keyctl=219, memfd_create=279, memfd_secret=447, unshare=97, clone=220,
        clone3=435, setns=268, flock=32, inotify_init1=26, fanotify_init=262, fcntl=25, mknodat=33, vmsplice=75,
        splice=76, tee=77, sendfile=71, io_uring_setup=425, socket=198, socketpair=199, setsockopt=208)),
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
    # named pipes: pipes made outside pipe()
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

LD, JA, JEQ, JGT, JSET, RET = 0x20, 0x05, 0x15, 0x25, 0x45, 0x06
ALLOW, ERRNO = 0x7FFF0000, 0x00050000


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


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


DENY = seccomp_program()  # built once, at import: every execution's process installs it


def install_seccomp() -> bool:
    """Install the deny filter on this process (inherited by its children and across exec). False: no filter
    for this machine."""
    prog = DENY
    if prog is None:
        return False
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "no_new_privs")
    fprog = _SockFprog(len(prog) // 8, prog)
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp")
    return True
