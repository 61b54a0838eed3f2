"""Round 5: a one-node torchrun job listens on 127.0.0.1 only (dist.loopback_store, docs/sandbox.md "Trust
boundaries"): its store, gloo's pairs (and the split placement's bridge over them). torchrun's own store still listens
on every interface unless launched with a file rendezvous and no shared store (the third case: then nothing does).
On the code before, the workers' gloo pairs listened on the host's address and the documented launch had rank 0's
store on every interface: checked by running these at that commit."""
import os
from pathlib import Path

import pytest
import torch.distributed as td

from helpers import hardening
from nanogrpo import dist

ROOT = Path(__file__).parent.parent


@pytest.mark.slow  # three 2-rank launches, ~1 min on 2 cores
@pytest.mark.parametrize("case", [c for c in hardening.CASES if c.kind == "trust"], ids=lambda c: c.name)
def test_a_one_node_job_listens_on_loopback_only(case, tmp_path):
    text, escaped, _ = hardening.run_case(case, ROOT, tmp_path)
    assert not escaped, text


# -- round 6: the run's store signed ----------------------------------------------------------
# Any process of the node can connect to 127.0.0.1, list the store's keys and set its own (measured: the "trust"
# case "a local process that is not a rank sets a key"); every value a rank reads carries an HMAC under the run's
# token, which only the run's ranks hold. Each failed on the code before (no SignedStore: the outsider's value read).

def signed_pair():
    server = td.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)
    outsider = td.TCPStore("127.0.0.1", server.port, is_master=False, wait_for_workers=False)
    return dist, dist.SignedStore(server, b"k" * 32), outsider


def test_a_value_set_by_a_rank_is_read_and_one_set_by_an_outsider_refused():
    dist, store, outsider = signed_pair()
    store.set("to_samplers/0/1", b"127.0.0.1:4242")
    assert store.get("to_samplers/0/1") == b"127.0.0.1:4242"
    assert "to_samplers/0/1" in outsider.list_keys()  # it can list and read: nothing there is secret
    outsider.set("to_samplers/0/1", b"10.0.0.9:4242")  # an address of its own for a rank's pair
    with pytest.raises(dist.StoreError, match="holds a value for 'to_samplers/0/1' that no rank of this run set"):
        store.get("to_samplers/0/1")
    outsider.set("short", b"x")
    with pytest.raises(dist.StoreError):
        store.get("short")


def test_a_signed_value_moved_to_another_key_or_signed_with_another_token_is_refused():
    dist, store, outsider = signed_pair()
    store.set("a", "1")
    outsider.set("b", outsider.get("a"))  # replayed under another key: the key is signed too
    with pytest.raises(dist.StoreError):
        store.get("b")
    dist.SignedStore(store.store, b"x" * 32).set("c", "1")  # another run's token
    with pytest.raises(dist.StoreError):
        store.get("c")
    assert store.add("n", 2) == 2 and store.check(["a"]) and store.num_keys() >= 3


def test_the_token_is_kept_only_in_a_directory_of_this_users_own(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setattr(dist, "TOKEN_FILE", None)
    token = dist.run_token("abc/0", create=True)
    path = tmp_path / f"nanogrpo-{os.getuid()}" / "store-29500-abc-0.token"
    assert len(token) == 32 and path.read_bytes() == token and path.stat().st_mode & 0o777 == 0o600
    assert dist.run_token("abc/0") == token and dist.TOKEN_FILE == path
    monkeypatch.setattr(dist, "TOKEN_FILE", None)
    path.parent.chmod(0o755)  # others could read it: refused
    with pytest.raises(dist.StoreError, match="not a directory of this user's only"):
        dist.run_token("abc/0")
