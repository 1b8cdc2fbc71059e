"""Adapters are written through a temporary folder of their own and renamed into place: two writers of one
folder (two methods' runs of one seed initialising the shared `init-...` adapters) never share a temporary folder,
both succeed, and the result is one valid adapter."""

import threading

import pytest
import torch
from safetensors.torch import load_file
from tiny_checkpoint import build_checkpoint

from binac_core.foundation.config import load_config
from binac_core.foundation.files import file_digest


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    from binac_core.model.policy import Policy

    base = build_checkpoint(tmp_path_factory.mktemp("init") / "model", hostile=False)
    return Policy(base, load_config("micro"), seed=0)


def _valid(policy, ref, name):
    state = load_file(f"{ref.path}/adapter_model.safetensors")
    assert state and all(torch.isfinite(v).all() for v in state.values())
    assert file_digest(ref.path) == ref.digest
    policy.loaded.pop(name, None)
    policy.sync(ref)  # loads back into the model


def _leftovers(parent, keep):
    return sorted(p.name for p in parent.iterdir() if p.name != keep)


def test_two_concurrent_writers_of_one_folder_both_succeed(policy, tmp_path, monkeypatch):
    """Both writers finish writing their files before either publishes (a barrier inside save_pretrained)."""
    dest = tmp_path / "init-s0" / "actor"
    barrier, one_at_a_time = threading.Barrier(2), threading.Lock()
    real = policy.model.save_pretrained

    def save_then_wait(*a, **k):
        # Two processes each have their own model; these threads share one, and peft's save_pretrained edits
        # the shared adapter config while it writes: one writer at a time, then both wait before publishing.
        with one_at_a_time:
            out = real(*a, **k)
        barrier.wait()
        return out

    monkeypatch.setattr(policy.model, "save_pretrained", save_then_wait)
    refs, errors = [None, None], []

    def writer(i):
        try:
            refs[i] = policy.save("actor", dest)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert refs[0] == refs[1]
    _valid(policy, refs[0], "actor")
    assert _leftovers(dest.parent, "actor") == []  # no temporary folder left behind


def test_interleaved_writes_keep_the_existing_equal_adapter(policy, tmp_path):
    """The same race, stepped by hand: write, write, publish, publish."""
    dest = tmp_path / "shared" / "critic"
    tmp1 = policy._write_temp("critic", dest)
    tmp2 = policy._write_temp("critic", dest)
    assert tmp1 != tmp2 and tmp1.parent == tmp2.parent == dest.parent
    first = policy._publish("critic", tmp1, dest)
    inode = dest.stat().st_ino
    second = policy._publish("critic", tmp2, dest)
    assert first == second and dest.stat().st_ino == inode  # the first one was kept
    assert not tmp2.exists()
    _valid(policy, second, "critic")
    assert _leftovers(dest.parent, "critic") == []


def test_a_different_adapter_replaces_the_folder(policy, tmp_path):
    dest = tmp_path / "step" / "actor"
    before = policy.save("actor", dest)
    with torch.no_grad():
        for p in policy.params("actor"):
            p.add_(0.01)
    after = policy.save("actor", dest)
    assert after.digest != before.digest and file_digest(dest) == after.digest
    _valid(policy, after, "actor")
    assert _leftovers(dest.parent, "actor") == []
