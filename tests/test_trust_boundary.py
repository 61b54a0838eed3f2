"""Round 5: a one-node torchrun job listens on 127.0.0.1 only (dist.loopback_store, docs/sandbox.md "Trust
boundaries"): its store, gloo's pairs (and the split placement's bridge over them). torchrun's own store still listens
on every interface unless launched with a file rendezvous and no shared store (the third case: then nothing does).
On the code before, the workers' gloo pairs listened on the host's address and the documented launch had rank 0's
store on every interface: checked by running these at that commit."""
from pathlib import Path

import pytest

from helpers import hardening

ROOT = Path(__file__).parent.parent


@pytest.mark.slow  # three 2-rank launches, ~1 min on 2 cores
@pytest.mark.parametrize("case", [c for c in hardening.CASES if c.kind == "trust"], ids=lambda c: c.name)
def test_a_one_node_job_listens_on_loopback_only(case, tmp_path):
    text, escaped, _ = hardening.run_case(case, ROOT, tmp_path)
    assert not escaped, text
