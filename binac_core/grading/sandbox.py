"""Run an untrusted Python program against assert tests: `run_python(program, tests, setup, timeout_s)`.

The program, then `setup` (MBPP's `test_setup_code`: two tasks set up objects from classes the program defines,
so it must come after the program), then the asserts run as one script in a fresh `/usr/bin/python3 -I` process
(the system interpreter: an unprivileged user cannot read a venv under /root). See the project's stack notes,
"Running untrusted code", and the practice in https://github.com/openai/human-eval (execution.py, which itself
is not a sandbox).

What it protects against, with bubblewrap (`bwrap`, Debian package `bubblewrap`):
- Runaway resources: rlimits set before the program runs (CPU seconds, address space, file size, processes
  and threads, open files, no core dumps) and a wall-clock timeout that SIGKILLs bwrap, whose pid namespace
  takes every process the program started down with it: loops, fork, memory and disk bombs end the run only.
- Escapes into the machine: as root, each run gets an unprivileged uid of its own (it appears as 65534,
  `nobody`, inside), so it cannot signal or read other processes, and one run's fork bomb cannot use up the
  process budget of runs beside it. New user, pid, network, ipc and uts namespaces (`--unshare-all`): no
  network (connections are refused), no view of the host's processes, killing its parent does nothing.
- Reading or changing files: the root is a read-only view of the system folders only (/usr, /etc, /bin, /lib...;
  not /root, /home, the repository or the data folder); /tmp is a private tmpfs of TMP_BYTES whose empty
  /tmp/work is the working folder; the environment is cleared; stdin is /dev/null (reads get EOF).
- Passing by exiting early: pass = exit status 0 AND a random per-run marker that a line appended after the
  asserts prints; `sys.exit(0)` or `os._exit(0)` before the asserts is a failure.
- Output floods: stdout and stderr go to anonymous files bounded by the file-size limit; OUTPUT_CAP bytes are kept.

What it does not protect against:
- Kernel exploits and hardware side channels: these are Linux namespaces, not a virtual machine.
- A program written to forge the marker by introspection (it is a constant of the running code), or tests
  satisfied by trickery such as objects whose `__eq__` always returns True: reward hacks, not escapes.
- Contention: a run may use a full core and MEMORY_BYTES of memory until its limits stop it.
- Without a working bwrap (not installed, or no user namespaces, e.g. some containers) it falls back to rlimits,
  the uid drop, a scrubbed environment and an owned temporary folder, with a loud warning: the program can then
  reach the network, read world-readable files and write world-writable folders; leftover processes are killed by
  uid (root only), and disk use is bounded per file, not in total.
- Run as non-root, there is no uid drop: the program runs as the caller's user inside bwrap's namespaces.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass

log = logging.getLogger("binac.grading.sandbox")

PYTHON = "/usr/bin/python3"
DEFAULT_TIMEOUT_S = 10.0
MEMORY_BYTES = 1 << 30
FILE_BYTES = 16 << 20
TMP_BYTES = 64 << 20
MAX_PROCS = 64
MAX_FILES = 256
OUTPUT_CAP = 16 << 10
WORKDIR = "/tmp/work"
SANDBOX_UID = 65534  # the uid the program sees inside bwrap's user namespace
UID_BASE, UID_SPAN = 2_000_000_000, 100_000_000  # host uids of runs: unused by accounts, distinct per run
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": WORKDIR}

# Runs inside the sandbox before any untrusted code: read the script from an inherited descriptor (so it is
# never a file in the sandbox), close it, set the limits, then run the script as a clean __main__ module.
_BOOT = """\
import os, resource, sys
def _boot(fd, limits):
    import sys  # the module globals are cleared below; keep what this frame needs as locals
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    for item in limits.split(","):
        name, soft, hard = item.split(":")
        resource.setrlimit(getattr(resource, name), (int(soft), int(hard)))
    code = compile(b"".join(chunks), "program.py", "exec")
    main = sys.modules["__main__"].__dict__
    keep = main["__builtins__"]
    main.clear()
    main.update(__name__="__main__", __builtins__=keep, __file__="program.py")
    sys.argv = ["program.py"]
    exec(code, main)
_boot(int(sys.argv[1]), sys.argv[2])
"""


class SandboxError(RuntimeError):
    """The sandbox itself failed (could not start, bwrap refused): not the program's fault."""


@dataclass(frozen=True)
class ExecResult:
    passed: bool
    """Exit status 0 and the end-of-tests marker seen (every assert ran and held)."""
    reason: str
    """One line: `passed`, `timed out after N s`, `test 2 failed: assert ... (AssertionError)`, ..."""
    returncode: int | None
    timed_out: bool
    stdout: str
    """The first OUTPUT_CAP bytes of stdout (the marker line removed)."""
    stderr: str
    """The first OUTPUT_CAP bytes of stderr."""
    duration_s: float
    isolation: str
    """`bwrap` or `rlimits` (the fallback)."""


@dataclass(frozen=True)
class _Span:
    name: str
    first: int
    last: int
    text: str


def run_python(program: str, tests: list[str], setup: str = "", timeout_s: float = DEFAULT_TIMEOUT_S) -> ExecResult:
    """Run `program`, then `setup`, then each assert of `tests` in the sandbox; never raises for program faults.

    Raises SandboxError only when the sandbox cannot run at all."""
    marker = secrets.token_hex(16)
    script, spans = _assemble(program, setup, list(tests), marker)
    mode = isolation()
    uid = _run_uid()
    with tempfile.TemporaryFile() as src, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        src.write(script.encode("utf-8", "replace"))
        src.seek(0)
        start = time.monotonic()
        with _WorkDir(mode, uid) as cwd:
            argv = _command(mode, src.fileno(), _limits(timeout_s, uid))
            timed_out, rc = _execute(argv, src.fileno(), out, err, uid, cwd, timeout_s)
        duration = time.monotonic() - start
        stdout, marker_seen = _read(out, marker)
        stderr, _ = _read(err, None)
    # bwrap's own failures (before the program starts) print "bwrap: ..." and exit 1. A program that fakes this
    # line only turns its own 0 into a counted grader error.
    if mode == "bwrap" and rc != 0 and stderr.startswith("bwrap: ") and not marker_seen:
        raise SandboxError(f"bubblewrap failed: {stderr.splitlines()[0]}")
    passed = rc == 0 and marker_seen and not timed_out
    reason = _reason(passed, timed_out, rc, stderr, spans, timeout_s)
    return ExecResult(passed, reason, rc, timed_out, stdout, stderr, duration, mode)


def _assemble(program: str, setup: str, tests: list[str], marker: str) -> tuple[str, list[_Span]]:
    """The script (program, setup, asserts, marker line) and the line span of each part, for error reasons."""
    parts = [("program", program), ("setup", setup)] + [(f"test {i}", t) for i, t in enumerate(tests, 1)]
    lines: list[str] = []
    spans = []
    for name, text in parts:
        # Python counts a lone CR as a line break; normalise so that our line numbers match its tracebacks.
        body = text.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n")
        first = len(lines) + 1
        lines.extend(body.split("\n") if body.strip() else [])
        spans.append(_Span(name, first, len(lines), body.strip()))
        lines.append("")
    lines.append(f"__import__('os').write(1, b'\\n{marker}\\n')")
    return "\n".join(lines) + "\n", spans


def _limits(timeout_s: float, uid: int) -> list[tuple[str, int, int]]:
    cpu = math.ceil(timeout_s) + 1
    procs = MAX_PROCS if os.geteuid() == 0 else _tasks_of(uid) + MAX_PROCS
    return [
        ("RLIMIT_CPU", cpu, cpu + 1), ("RLIMIT_AS", MEMORY_BYTES, MEMORY_BYTES),
        ("RLIMIT_FSIZE", FILE_BYTES, FILE_BYTES), ("RLIMIT_NPROC", procs, procs),
        ("RLIMIT_NOFILE", MAX_FILES, MAX_FILES), ("RLIMIT_CORE", 0, 0),
    ]


def _command(mode: str, fd: int, limits: list) -> list[str]:
    spec = ",".join(f"{name}:{soft}:{hard}" for name, soft, hard in limits)  # json would cost 10 ms to import
    python = [PYTHON, "-I", "-c", _BOOT, str(fd), spec]
    return _bwrap_prefix() + python if mode == "bwrap" else python


def _bwrap_prefix() -> list[str]:
    argv = [shutil.which("bwrap") or "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
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


def _execute(argv, fd, out, err, uid, cwd, timeout_s) -> tuple[bool, int | None]:
    """Start, wait up to `timeout_s`, SIGKILL the whole process group on timeout; returns (timed_out, status)."""
    prefix, identity = _as_user(uid)
    env = dict(ENV, HOME=cwd, TMPDIR=cwd) if cwd else {"PATH": ENV["PATH"]}
    try:
        proc = subprocess.Popen(
            prefix + argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, pass_fds=(fd,), cwd=cwd or "/",
            env=env, start_new_session=True, **identity,
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


def _read(fh, marker: str | None) -> tuple[str, bool]:
    """The first OUTPUT_CAP bytes of a captured stream (marker line removed) and whether the marker was seen."""
    fh.seek(0)
    data = fh.read(FILE_BYTES + 1)
    seen = False
    if marker is not None:
        token = f"\n{marker}\n".encode()
        seen = token in data
        data = data.replace(token, b"")
    text = data[:OUTPUT_CAP].decode("utf-8", "replace")
    return (text + "\n[output truncated]" if len(data) > OUTPUT_CAP else text), seen


_FRAME_RE = re.compile(r'File "program\.py", line (\d+)')


def _reason(passed, timed_out, rc, stderr, spans, timeout_s) -> str:
    if timed_out:
        return f"timed out after {timeout_s:g} s"
    if passed:
        return "passed"
    if rc == 0:
        return "exited with status 0 before the tests finished"
    error = next((ln.strip() for ln in reversed(stderr.splitlines()) if ln.strip()), "")
    if not error:
        return f"exited with status {rc}{_signal_note(rc)}"
    last_traceback = stderr.rsplit("Traceback (most recent call last):", 1)[-1]
    frames = [int(n) for n in _FRAME_RE.findall(last_traceback)]
    span = _span_at(spans, frames[0]) if frames else None
    if span is None:
        return error[:300]
    if span.name.startswith("test"):
        return f"{span.name} failed: {span.text[:200]} ({error[:200]})"
    return f"error in {span.name} (line {frames[-1]}): {error[:300]}"


def _span_at(spans: list[_Span], line: int) -> _Span | None:
    return next((s for s in spans if s.first <= line <= s.last), None)


def _signal_note(rc: int | None) -> str:
    # bwrap reports a child killed by signal N as status 128+N; a plain subprocess as -N.
    number = -rc if rc is not None and rc < 0 else (rc - 128 if rc and rc > 128 else None)
    try:
        return f" (killed by {signal.Signals(number).name})" if number else ""
    except ValueError:
        return ""


# --------------------------------------------------------------------------- choosing the isolation


@functools.lru_cache(maxsize=1)
def isolation() -> str:
    """`bwrap` when bubblewrap works on this machine, else `rlimits` (warned once, loudly). Probed once."""
    return _choose_isolation()


def _choose_isolation() -> str:
    if not os.access(PYTHON, os.X_OK):
        raise SandboxError(f"sandbox interpreter not found: {PYTHON}")
    bwrap = shutil.which("bwrap")
    problem = "bwrap is not installed (Debian: apt-get install bubblewrap)"
    if bwrap:
        probe = _probe_bwrap()
        if probe is None:
            return "bwrap"
        problem = f"bwrap does not work here ({probe})"
    message = (
        f"binac sandbox: {problem}; falling back to rlimits only: programs can reach the network and read "
        "world-readable files"
    )
    warnings.warn(message, RuntimeWarning, stacklevel=2)
    log.warning(message)
    return "rlimits"


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
