"""A real full disk for the tests that need one: a small tmpfs, mounted where the machine permits it (root)."""

import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tmpfs(d: Path, size: str):
    """A tmpfs of `size` (mount's size=, e.g. "1m") mounted at the new directory `d`, unmounted after; a pytest skip
    where mounting is not permitted."""
    d.mkdir()
    if shutil.which("mount") is None or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)],
                                                       capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and mount permission)")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)
