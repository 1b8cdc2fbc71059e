"""Adversarial sandbox tests: each runs one hostile program and checks one property of `run_python`.

Properties that only bubblewrap provides (network, private filesystem view) are skipped, with the reason, where the
sandbox had to fall back to rlimits; CI installs bubblewrap, so there they run.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from binac_core.errors import BinacError
from binac_core.grading.sandbox import IsolationRequired, run_python
from binac_core.grading.sandbox import isolation as iso
from binac_core.grading.sandbox.protocol import OUTPUT_CAP

needs_bwrap = pytest.mark.needs_tool("bwrap")  # the rlimits fallback cannot give what these test


def test_a_correct_program_passes():
    result = run_python("def f(x):\n    return x + 1\n", ["assert f(1) == 2", "assert f(2) == 3"])
    assert (result.passed, result.reason, result.returncode, result.timed_out) == (True, "passed", 0, False)


def test_infinite_loop_times_out():
    result = run_python("while True:\n    pass\n", ["assert True"], timeout_s=1)
    assert result.timed_out and not result.passed and result.reason == "timed out after 1 s"
    assert result.returncode != 0  # killed, not finished


def test_a_test_that_failed_before_a_timeout_is_named():
    program = "def f(x):\n    while x == 3:\n        pass\n    return x\n"
    result = run_python(program, ["assert f(1) == 1", "assert f(2) == 5", "assert f(3) == 3"], timeout_s=1)
    assert result.timed_out and not result.passed
    assert result.reason == "test 2 failed: assert f(2) == 5 (AssertionError: got 2)"


def test_fork_bomb_is_stopped_and_this_process_can_still_fork():
    result = run_python("import os\nwhile True:\n    os.fork()\n", ["assert True"], timeout_s=5)
    assert not result.passed
    assert subprocess.run(["true"]).returncode == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid per run (so a process budget per run) needs root")
def test_fork_bomb_does_not_starve_a_run_beside_it():
    bomb = threading.Thread(
        target=run_python, args=("import os\nwhile True:\n    os.fork()\n", []), kwargs={"timeout_s": 3}
    )
    bomb.start()
    try:
        results = [
            run_python("import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.wait()\n", []) for _ in range(5)
        ]
    finally:
        bomb.join()
    assert [r.reason for r in results] == ["passed"] * 5


def test_memory_bomb_fails_with_memory_error():
    program = "chunks = []\nwhile True:\n    chunks.append(bytearray(64 << 20))\n"
    result = run_python(program, ["assert True"], timeout_s=10)
    assert not result.passed and "MemoryError" in result.reason


def test_one_huge_file_hits_the_file_size_limit():
    program = "with open('big.bin', 'wb') as fh:\n    for _ in range(200):\n        fh.write(b'x' * (1 << 20))\n"
    result = run_python(program, ["assert True"])
    assert not result.passed and "File too large" in result.reason


@needs_bwrap
def test_many_files_hit_the_private_tmp_size_limit():
    program = (
        "for k in range(40):\n    with open(f'part{k}.bin', 'wb') as fh:\n"
        "        for _ in range(8):\n            fh.write(b'x' * (1 << 20))\n"
    )
    result = run_python(program, ["assert True"])
    assert not result.passed and "No space left on device" in result.reason


def test_files_outside_its_folder_cannot_be_changed_or_deleted(tmp_path):
    tmp_path.chmod(0o777)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    victim.chmod(0o666)  # world-writable: only the sandbox, not file permissions, stands in the way
    program = (
        f"import os\nfor attempt in (lambda: open({str(victim)!r}, 'w').write('gone'), lambda: os.remove({str(victim)!r}),\n"
        f"                lambda: open({str(tmp_path / 'new.txt')!r}, 'w').write('new')):\n"
        "    try:\n        attempt()\n    except OSError as exc:\n        print(type(exc).__name__)\n"
    )
    run_python(program, [])
    assert victim.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["victim.txt"]


def test_system_folders_are_read_only():
    probe = Path("/usr") / f"binac-probe-{secrets.token_hex(4)}"
    result = run_python(f"open({str(probe)!r}, 'w').write('x')\n", [])
    assert not result.passed and ("Read-only file system" in result.reason or "Permission denied" in result.reason)
    assert not probe.exists()


@needs_bwrap
def test_the_repository_and_home_folders_are_not_visible():
    program = f"import os\nprint(os.path.exists({str(Path(__file__).resolve())!r}), os.path.exists('/root'))\n"
    result = run_python(program, [])
    assert result.passed and result.stdout.split() == ["False", "False"]


def test_killing_its_parent_leaves_this_process_alive():
    me = os.getpid()
    program = (
        "import os, signal\nparent = os.getppid()\n"
        "try:\n    os.kill(parent, signal.SIGKILL)\n    outcome = 'sent'\nexcept OSError as exc:\n"
        "    outcome = type(exc).__name__\nprint('after the kill:', outcome, flush=True)\n"
    )
    result = run_python(program, ["assert outcome in ('sent', 'PermissionError')"])
    # The run went on after the kill, finished normally and was graded by this very process.
    assert (result.passed, result.reason, result.returncode, result.timed_out) == (True, "passed", 0, False)
    assert result.stdout.startswith("after the kill: ")
    assert os.getpid() == me
    os.kill(me, 0)


def test_other_processes_cannot_be_signalled():
    # `cat` waits on its stdin until we close it: alive exactly until then, with no timing involved.
    bystander = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        program = (
            f"import os, signal\nfor target in ({bystander.pid}, -1):\n"
            "    try:\n        os.kill(target, signal.SIGKILL)\n    except OSError:\n        pass\n"
        )
        run_python(program, [])
    finally:
        bystander.stdin.close()
        status = bystander.wait()
    assert status == 0  # it ended by reading EOF, not by a signal (that would be -9)


def test_environment_is_scrubbed(monkeypatch):
    secret = secrets.token_hex(16)
    monkeypatch.setenv("BINAC_SANDBOX_SECRET", secret)
    program = (
        "import os\nprint(dict(os.environ))\n"
        f"for path in ('/proc/1/environ', '/proc/{os.getpid()}/environ', '/proc/self/environ'):\n"
        "    try:\n        print(open(path, 'rb').read())\n    except OSError as exc:\n        print(exc)\n"
    )
    result = run_python(program, [])
    assert result.returncode == 0
    assert secret not in result.stdout and secret not in result.stderr


@needs_bwrap
def test_network_connections_are_refused():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')\n"
        result = run_python(program, [])
        server.setblocking(False)  # the run is over: a connection it made would be waiting in the backlog now
        with pytest.raises(BlockingIOError):
            server.accept()
    assert not result.passed and "connected" not in result.stdout


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_no_processes_are_left_behind():
    marker = f"271.{secrets.randbelow(10**6):06d}"  # a sleep duration no other process uses
    program = (
        "import subprocess\n"
        f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
        f"subprocess.Popen(['sh', '-c', 'sleep {marker} &'])\n"
    )
    result = run_python(program, ["assert True"])
    assert result.passed
    assert _processes_with(marker) == []


@pytest.mark.parametrize("exit_early", ["import os\nos._exit(0)", "import sys\nsys.exit(0)", "raise SystemExit"])
def test_exiting_with_status_zero_before_the_asserts_fails(exit_early):
    result = run_python(f"def f():\n    return 1\n{exit_early}\n", ["assert f() == 2"])
    assert not result.passed and result.returncode == 0
    assert result.reason == "exited with status 0 before the tests finished"


def test_reading_stdin_gets_end_of_file():
    # Give this process a stdin that never ends: a program that inherited it would block and time out.
    read_end, write_end = os.pipe()
    os.write(write_end, b"input meant for the test process\n")
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        result = run_python("import sys\ndata = sys.stdin.read()\n", ["assert data == ''"], timeout_s=3)
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)
    assert result.passed, result.reason


def test_failing_assert_fails_with_a_reason_naming_it():
    result = run_python("def f(x):\n    return x\n", ["assert f(1) == 1", "assert f(2) == 5", "assert f(3) == 3"])
    assert not result.passed
    assert result.reason == "test 2 failed: assert f(2) == 5 (AssertionError: got 2)"


def test_an_exception_in_a_test_is_named_with_its_message():
    result = run_python("def f(x):\n    return 1 / x\n", ["assert f(1) == 1", "assert f(0) == 0"])
    assert not result.passed
    assert result.reason == "test 2 failed: assert f(0) == 0 (ZeroDivisionError: division by zero)"


def test_an_error_in_setup_is_named():
    result = run_python("x = 1\n", ["assert x == 1"], setup="y = 1\nz = undefined_name\n")  # line 4 of the script
    assert not result.passed
    assert result.reason == "error in setup (line 4): NameError: name 'undefined_name' is not defined"


def test_syntax_error_is_reported_as_a_program_error():
    result = run_python("def f(:\n    return 1\n", ["assert f() == 1"])
    assert not result.passed and result.reason.startswith("error in program") and "SyntaxError" in result.reason


def test_output_flood_is_capped():
    result = run_python("while True:\n    print('x' * 1000)\n", [], timeout_s=5)
    assert not result.passed and len(result.stdout) <= OUTPUT_CAP + 100


def test_program_runs_as_an_unprivileged_user():
    result = run_python("import os\n", ["assert os.getuid() != 0 and os.geteuid() != 0"])
    assert result.passed, result.reason


# --------------------------------------------------------------------------- fallback (no bubblewrap)


def _no_bwrap(monkeypatch, accepted: str) -> None:
    """As on a machine without bubblewrap (the probe finds none), the process accepting `accepted`."""
    monkeypatch.setattr(iso, "_probe_result", lambda: ("rlimits", "bwrap is not installed"))
    monkeypatch.setitem(iso.ACCEPTED, "mode", accepted)


def test_the_probe_names_a_missing_bwrap(monkeypatch):
    monkeypatch.setattr(iso.shutil, "which", lambda name: None)
    assert iso._choose_isolation() == ("rlimits", "bwrap is not installed")


def test_without_bwrap_the_sandbox_refuses_unless_rlimits_is_accepted(monkeypatch):
    _no_bwrap(monkeypatch, "bwrap")
    with pytest.raises(BinacError) as refused:
        run_python("def f():\n    return 2\n", ["assert f() == 2"])
    message = str(refused.value)
    assert "\n" not in message and "apt-get install bubblewrap" in message and "grading.sandbox: rlimits" in message
    assert isinstance(refused.value, IsolationRequired)


def test_without_bwrap_an_accepted_rlimits_sandbox_runs_and_warns(monkeypatch, caplog):
    _no_bwrap(monkeypatch, "rlimits")
    iso._warn_rlimits.cache_clear()
    with (
        caplog.at_level(logging.WARNING, logger="binac.grading.sandbox"),
        pytest.warns(RuntimeWarning, match="rlimits"),
    ):
        result = run_python("def f():\n    return 2\n", ["assert f() == 2"])
    assert (result.isolation, result.passed) == ("rlimits", True)
    assert "grading.sandbox: rlimits" in caplog.text


def test_a_refusal_is_not_scored_as_a_grader_error(monkeypatch):
    from binac_core.benchmarks.grade import grade
    from binac_core.grading.counters import grader_counts

    _no_bwrap(monkeypatch, "bwrap")
    before = grader_counts()
    row = {"id": 1, "question": "q", "tests": ["assert f() == 2"], "setup": ""}
    with pytest.raises(IsolationRequired):
        grade("mbpp", row, "```python\ndef f():\n    return 2\n```")
    assert grader_counts()["errors"] == before["errors"]


def test_a_code_benchmark_is_refused_before_any_compute_without_bwrap(monkeypatch):
    from binac_core.runs.plans import plan, plan_compare

    _no_bwrap(monkeypatch, "bwrap")
    for check in (
        lambda: plan("llama1b-mbpp", "grpo", 1, 0, None, None),
        lambda: plan_compare("llama1b-mbpp", ["grpo"], [0], 1, None),
    ):
        with pytest.raises(BinacError, match="apt-get install bubblewrap") as refused:
            check()
        assert "grading.sandbox: rlimits" in str(refused.value) and "\n" not in str(refused.value)


def test_a_code_benchmark_runs_without_bwrap_when_rlimits_is_accepted(monkeypatch):
    from binac_core.runs.plans import isolation_used, plan

    _no_bwrap(monkeypatch, "bwrap")  # the config's setting is what the plan reads, not the process's
    overrides = {"grading.sandbox": "rlimits", "generation.backend": "hf"}
    cfg, _, _ = plan("llama1b-mbpp", "grpo", 1, 0, overrides, None)
    assert cfg.flat()["grading.sandbox"] == "rlimits" and isolation_used(cfg) == "rlimits"


def test_benchmarks_that_run_no_code_never_probe_the_sandbox(monkeypatch):
    from binac_core.runs.plans import isolation_used, plan

    def probe():
        raise AssertionError("probed")

    monkeypatch.setattr(iso, "_probe_result", probe)
    monkeypatch.setitem(iso.ACCEPTED, "mode", "bwrap")
    cfg, _, _ = plan("micro", "grpo", 1, 0, None, None)
    assert cfg.flat()["grading.sandbox"] == "bwrap" and isolation_used(cfg) == "none"


def test_fallback_mode_still_grades_and_times_out(monkeypatch):
    monkeypatch.setattr(iso, "isolation", lambda: "rlimits")
    monkeypatch.setitem(iso.ACCEPTED, "mode", "rlimits")
    good = run_python("def f():\n    return 2\n", ["assert f() == 2"])
    loop = run_python("while True:\n    pass\n", [], timeout_s=1)
    early = run_python("import os\nos._exit(0)\n", ["assert False"])
    assert (good.isolation, good.passed) == ("rlimits", True)
    assert loop.timed_out and not early.passed


@pytest.mark.skipif(os.geteuid() != 0, reason="the fallback's sweep of leftover processes needs root (a uid per run)")
def test_fallback_mode_leaves_no_processes_behind(monkeypatch):
    monkeypatch.setattr(iso, "isolation", lambda: "rlimits")
    monkeypatch.setitem(iso.ACCEPTED, "mode", "rlimits")
    marker = f"272.{secrets.randbelow(10**6):06d}"
    program = f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
    assert run_python(program, []).passed
    assert _processes_with(marker) == []
