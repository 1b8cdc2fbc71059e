"""Process isolation of the sandbox (`binac_core.grading.sandbox`, threat model in docs/sandbox.md). It holds
bubblewrap's namespaces or the rlimits fallback, the resource limits, the uid per run, the fallback's working folder,
starting and killing a run (`_execute`), and choosing the isolation (`isolation`, probed once per process; `accept` and
`require_isolation`: bwrap is required unless the run accepts rlimits with `grading.sandbox: rlimits`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import secrets
import select
import shutil
import signal
import subprocess
import tempfile
import time
import warnings

from binac_core.errors import BinacError
from binac_core.grading.sandbox.protocol import _BOOT, MAX_DEPTH, RESULT_CAP

log = logging.getLogger("binac.grading.sandbox")
PYTHON = "/usr/bin/python3"
MEMORY_BYTES = 512 << 20
FILE_BYTES = 16 << 20
TMP_BYTES = 64 << 20
MAX_TASKS = 4  # processes and threads of the program, its own included (RLIMIT_NPROC; MBPP programs need 1)
MAX_FILES = 256
WORKDIR = "/tmp/work"
SANDBOX_UID = 65534  # the uid the program sees inside bwrap's user namespace
UID_BASE, UID_SPAN = 2_000_000_000, 100_000_000  # host uids of runs: unused by accounts, distinct per run
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": WORKDIR}


class SandboxError(RuntimeError):
    """The sandbox itself failed (could not start, bwrap refused): not the program's fault."""


ACCEPTED = {"mode": "bwrap"}
"""Process-wide: the weakest isolation this process accepts, set by the run from its `grading.sandbox` (`accept`;
listed in `binac_core.model.runtime`). `bwrap` (default): `run_python` refuses to run without a working bwrap."""


class IsolationRequired(BinacError):
    """Only the rlimits fallback works here and the run did not accept it (`grading.sandbox: rlimits`): a setup
    fault, raised before any compute by the entry points' plans and again by `run_python`; never scored as a
    grader error (binac_core/benchmarks/grade.py lets it through)."""


def accept(mode: str) -> None:
    """Set the process's accepted isolation: `bwrap` (bubblewrap required) or `rlimits` (the fallback accepted)."""
    if mode not in ("bwrap", "rlimits"):
        raise BinacError(f"grading.sandbox must be bwrap or rlimits (got {mode!r})")
    ACCEPTED["mode"] = mode


def require_isolation(accepted: str) -> str:
    """The isolation `run_python` will use here under `accepted`; IsolationRequired (one line naming the fix and
    the setting) when bwrap does not work and `accepted` is not `rlimits`. Probes bwrap once per process."""
    mode = isolation()
    if mode != "bwrap" and accepted != "rlimits":
        problem = _probe_result()[1] or "bwrap is not used"
        raise IsolationRequired(
            f"the code sandbox needs a working bubblewrap: {problem}; install it (Debian: apt-get install "
            "bubblewrap) or accept the weaker rlimits-only sandbox, where programs can reach the network and read "
            "world-readable files, with `grading.sandbox: rlimits`"
        )
    if mode != "bwrap":
        _warn_rlimits()
    return mode


@functools.lru_cache(maxsize=1)
def _warn_rlimits() -> None:
    message = (
        "binac sandbox: bubblewrap does not work here; running with rlimits only, as `grading.sandbox: "
        "rlimits` accepts: programs can reach the network and read world-readable files"
    )
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    log.warning(message)


def isolation() -> str:
    """`bwrap` when bubblewrap works on this machine, else `rlimits`. Probed once per process."""
    return _probe_result()[0]


@functools.lru_cache(maxsize=1)
def _probe_result() -> tuple[str, str | None]:
    return _choose_isolation()


def _choose_isolation() -> tuple[str, str | None]:
    """(`bwrap`, None) when bubblewrap works, else (`rlimits`, why it does not)."""
    if not os.access(PYTHON, os.X_OK):
        raise SandboxError(f"sandbox interpreter not found: {PYTHON}")
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return "rlimits", "bwrap is not installed"
    probe = _probe_bwrap()
    if probe is None:
        return "bwrap", None
    return "rlimits", f"bwrap does not work here ({probe})"


def _probe_bwrap() -> str | None:
    """None when bwrap runs a trivial program as the sandbox will; else its first error line."""
    prefix, identity = _as_user(_run_uid())
    argv = prefix + _bwrap_prefix() + [PYTHON, "-I", "-c", "pass"]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, env={}, **identity)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if done.returncode != 0:
        return (done.stderr.decode("utf-8", "replace").strip().splitlines() or [f"status {done.returncode}"])[0]
    return None


def _limits(timeout_s: float, uid: int, mode: str) -> list[tuple[str, int, int]]:
    cpu = math.ceil(timeout_s) + 1
    # RLIMIT_NPROC counts the tasks of the uid: in bwrap, its init process (pid 1 of the namespace) counts too.
    tasks = MAX_TASKS + (1 if mode == "bwrap" else 0)
    procs = tasks if os.geteuid() == 0 else _tasks_of(uid) + tasks
    return [
        ("RLIMIT_CPU", cpu, cpu + 1),
        ("RLIMIT_AS", MEMORY_BYTES, MEMORY_BYTES),
        ("RLIMIT_FSIZE", FILE_BYTES, FILE_BYTES),
        ("RLIMIT_NPROC", procs, procs),
        ("RLIMIT_NOFILE", MAX_FILES, MAX_FILES),
        ("RLIMIT_CORE", 0, 0),
    ]


def _command(mode: str, fd: int, results_fd: int, limits: list) -> list[str]:
    spec = ",".join(f"{name}:{soft}:{hard}" for name, soft, hard in limits)  # json would cost 10 ms to import
    budget = RESULT_CAP // 2  # values; the rest is room for the records around them
    python = [PYTHON, "-I", "-c", _BOOT, str(fd), str(results_fd), spec, str(budget), str(MAX_DEPTH)]
    return _bwrap_prefix() + python if mode == "bwrap" else python


def _bwrap_prefix() -> list[str]:
    argv = [
        shutil.which("bwrap") or "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
    ]
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += ["--dev", "/dev", "--proc", "/proc", "--size", str(TMP_BYTES), "--tmpfs", "/tmp", "--dir", WORKDIR]
    for key, value in ENV.items():
        argv += ["--setenv", key, value]
    # Last: the root bwrap built (a tmpfs holding the mount points) becomes read-only; /tmp stays writable.
    return argv + ["--remount-ro", "/", "--chdir", WORKDIR]


def _execute(argv, fds, out, err, uid, cwd, timeout_s) -> tuple[bool, int | None]:
    """Start, wait up to `timeout_s`, SIGKILL the whole process group on timeout; returns (timed_out, status)."""
    prefix, identity = _as_user(uid)
    env = dict(ENV, HOME=cwd, TMPDIR=cwd) if cwd else {"PATH": ENV["PATH"]}
    try:
        proc = subprocess.Popen(
            prefix + argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            pass_fds=fds,
            cwd=cwd or "/",
            env=env,
            start_new_session=True,
            **identity,
        )
    except OSError as exc:
        raise SandboxError(f"cannot start the sandbox: {exc}") from exc
    timed_out = not _exited_within(proc, timeout_s)
    if timed_out:
        # Not yet reaped, so its pid still names its group: the kill cannot hit a recycled pid.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if os.geteuid() == 0:
        # The uid is this run's alone. Fallback: stragglers (no pid namespace). bwrap: its namespace may still
        # be tearing down when bwrap returns (the kernel is killing it); wait until it is gone.
        _kill_uid(uid, thorough=cwd is not None)  # cwd is set in fallback mode only
    return timed_out, proc.returncode


def _as_user(uid: int) -> tuple[list[str], dict]:
    """How to start as `uid`: a `setpriv` prefix (root), Popen's user/group (root, no setpriv), or as is.

    setpriv keeps Popen on vfork: with `user=`, Python must fork() the whole (large) parent, ~20 ms a run."""
    if os.geteuid() != 0:
        return [], {}
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--"], {}
    return [], {"user": uid, "group": uid, "extra_groups": []}


def _exited_within(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait for the exit without reaping it. A pidfd wakes us at once; `Popen.wait(timeout)` polls with
    growing sleeps (up to 50 ms), which would double the cost of a typical 35 ms run."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd (old kernel or Python): poll, then leave reaping to wait()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
            time.sleep(0.005)
        return False
    try:
        return bool(select.select([pidfd], [], [], timeout_s)[0])
    finally:
        os.close(pidfd)


class _WorkDir:
    """Fallback mode only: an empty temporary folder owned by the run's uid (bwrap makes its own on a tmpfs)."""

    def __init__(self, mode: str, uid: int):
        self.mode, self.uid, self.path = mode, uid, None

    def __enter__(self) -> str | None:
        if self.mode == "bwrap":
            return None
        self.path = tempfile.mkdtemp(prefix="binac-run-")
        os.chmod(self.path, 0o700)
        if os.geteuid() == 0:
            os.chown(self.path, self.uid, self.uid)
        return self.path

    def __exit__(self, *exc) -> None:
        if self.path:
            shutil.rmtree(self.path, ignore_errors=True)


def _run_uid() -> int:
    return UID_BASE + secrets.randbelow(UID_SPAN) if os.geteuid() == 0 else os.getuid()


def _kill_uid(uid: int, thorough: bool) -> None:
    """SIGKILL every process of `uid` until none is left (a fork loop may still be spawning)."""
    for _ in range(1000):
        pids = _pids_of(uid, thorough)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.002)
    log.warning("sandbox: processes of uid %d survived 1000 kill rounds", uid)


def _pids_of(uid: int, thorough: bool = False) -> list[int]:
    """Live processes of `uid`; zombies are skipped (already dead, their new parent reaps them).

    The quick test is the owner of /proc/PID, which a process can turn to root by making itself non-dumpable;
    `thorough` reads the real uid from /proc/PID/status instead (3x slower; used where no pid namespace helps)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if _uid_of(entry, thorough) == uid and not _is_zombie(entry):
                    pids.append(int(entry))
            except (FileNotFoundError, ProcessLookupError):
                pass
    return pids


def _uid_of(pid: str, thorough: bool) -> int:
    if not thorough:
        return os.stat(f"/proc/{pid}").st_uid
    with open(f"/proc/{pid}/status", "rb") as fh:
        return int(next(line for line in fh if line.startswith(b"Uid:")).split()[1])


def _is_zombie(pid: str) -> bool:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return fh.read().rsplit(b")", 1)[-1].split()[0] == b"Z"


def _tasks_of(uid: int) -> int:
    """Threads and processes of `uid` now: RLIMIT_NPROC counts them all, so a non-root limit starts above them."""
    total = 0
    for pid in _pids_of(uid):
        try:
            total += len(os.listdir(f"/proc/{pid}/task"))
        except FileNotFoundError:
            pass
    return total
