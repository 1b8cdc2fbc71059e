"""binac_core/runs/runlock.py with real processes: a run lock or a flow run's claim held by a live process is
alive, one whose process was killed (SIGKILL, after it said it holds the lock) is dead, one released normally is
neither. The study's use of it: tests/flows/test_fanout.py; over a real Prefect server: tests/integration/."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from binac_core.runs.runlock import claim_path, flow_run_claim, lock_path, probe, probe_claim, run_lock

REPO = Path(__file__).resolve().parents[2]


def holder(home: Path, what: str) -> subprocess.Popen:
    """A process that takes the run lock of key `k1` (`what` = lock) or the claim of flow run `fr-1` (claim) for
    flow run `fr-1`, says `held` and waits for a line on stdin before letting go."""
    take = "run_lock(home, 'k1', 'fr-1')" if what == "lock" else "flow_run_claim(home, 'fr-1')"
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from binac_core.runs.runlock import flow_run_claim, run_lock
        home = Path({str(home)!r})
        with {take}:
            print("held", flush=True)
            sys.stdin.readline()
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("what", ["lock", "claim"])
def test_a_killed_holder_is_dead_a_live_one_is_not(tmp_path, what):
    look = (lambda: probe(tmp_path, "k1")) if what == "lock" else (lambda: probe_claim(tmp_path, "fr-1"))
    proc = holder(tmp_path, what)
    alive = look()
    assert alive.held and alive.owner["pid"] == proc.pid and not alive.dead("fr-1")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    gone = look()
    assert not gone.held and gone.dead("fr-1") and not gone.dead("fr-2")


@pytest.mark.parametrize("what", ["lock", "claim"])
def test_a_holder_that_lets_go_is_not_dead(tmp_path, what):
    proc = holder(tmp_path, what)
    proc.communicate("\n", timeout=60)
    assert proc.returncode == 0
    if what == "lock":
        assert probe(tmp_path, "k1").owner["state"] == "exited" and not probe(tmp_path, "k1").dead("fr-1")
    else:  # the claim's file is removed when its body ends
        assert not claim_path(tmp_path, "fr-1").exists() and not probe_claim(tmp_path, "fr-1").dead("fr-1")


def test_a_claim_outside_a_flow_run_holds_nothing_and_a_raising_body_lets_go(tmp_path):
    with flow_run_claim(tmp_path, None):
        assert not (tmp_path / "locks").exists()
    with pytest.raises(RuntimeError), flow_run_claim(tmp_path, "fr-1"):
        assert probe_claim(tmp_path, "fr-1").held
        raise RuntimeError("the flow failed")
    assert not claim_path(tmp_path, "fr-1").exists()
    with pytest.raises(RuntimeError), run_lock(tmp_path, "k1", "fr-1"):
        raise RuntimeError("the run failed")
    assert probe(tmp_path, "k1").owner["state"] == "exited" and lock_path(tmp_path, "k1").exists()
