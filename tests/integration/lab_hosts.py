"""Hosts on one machine, for the lab proof (tests/integration/test_lab_proof.py): a lab worker in its own mount, pid
and host-name namespaces (`unshare --mount --pid --uts --fork --kill-child`, run as root) that sees none of the
other hosts' files, the submitter's or the lab server's.

Inside a host's namespace a fresh tmpfs covers the temporary directory, the submitter's checkout, the folder the
venv's editable install of binac points at, the homes named in `hide` (the submitter's, the lab server's) and
Prefect's own home folder (`~/.prefect`); then the host's code copy is bound back at its own path (under the
temporary directory, so no other host sees it) and the venv at its paths (it may live inside a hidden checkout),
and a fresh tmpfs becomes the host's `$BINAC_HOME`. The host then runs `scripts/lab.py worker` of its copy (with
`PYTHONPATH` the copy) from the lab file copied into it, and a `sleep` is the namespace's first process: a SIGKILL
to the `unshare` process group (`kill`) ends it, and with it every process of the namespace, as a lost host.

The test reads a host's files through `/proc/<pid>/root` of that first process (`path`), which resolves in the
host's own mounts. Nothing here waits on a clock: `started` and `path` are polled by the caller with a deadline."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

SETUP = r"""
set -eu
hostname "$HOST_NAME"
mount --make-rprivate /
mount --bind "$HOST_VENV" "$HOST_CODE/.venv"
cd "$HOST_CODE"
IFS=:
for d in $HOST_HIDE; do mkdir -p "$d"; mount -t tmpfs hidden "$d"; done
mkdir -p "$HOST_CODE"
mount --no-canonicalize --rbind . "$HOST_CODE"
for v in $HOST_VENVS; do mkdir -p "$v"; mount --bind "$HOST_CODE/.venv" "$v"; done
unset IFS
cd "$HOST_CODE"
mkdir -p "$BINAC_HOME"
mount -t tmpfs home "$BINAC_HOME"
mkdir -p "$BINAC_FAULT_DIR"
"$HOST_VENV/bin/python" scripts/lab.py worker --lab-file lab.env
exec sleep infinity
"""
"""The namespace's setup (every path from the environment), then the worker; `.` still names the copy's folder
on the real disk after the temporary directory is covered, which is how the copy is bound back."""


def code_files(repo: Path) -> list[str]:
    """The checkout's files as the submitter has them: tracked and untracked ones git does not ignore."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        check=True,
        capture_output=True,
    ).stdout
    return sorted({f for f in out.decode().split("\0") if f and (repo / f).is_file()})


def copy_code(repo: Path, dest: Path) -> Path:
    """A copy of the checkout's code at `dest` (the same bytes the submitter's stage code digest hashes)."""
    for name in code_files(repo):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, dest / name)
    (dest / ".venv").mkdir()
    return dest


def editable_root() -> Path | None:
    """The folder the venv's editable install of binac imports from (its `direct_url.json`), if any."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        text = distribution("binac").read_text("direct_url.json")
    except PackageNotFoundError:
        return None
    found = json.loads(text or "{}")
    url, editable = found.get("url", ""), found.get("dir_info", {}).get("editable", False)
    return Path(url.removeprefix("file://")) if editable and url.startswith("file://") else None


class Host:
    """One lab worker host (the module docstring). `env` is its starting environment (no lab address in it)."""

    def __init__(self, name: str, root: Path, repo: Path, lab_file: Path, env: dict, hide: list[Path]):
        self.name, self.root = name, root
        self.code = copy_code(repo, root / "code")
        shutil.copy(lab_file, self.code / "lab.env")
        self.home = Path("/") / "tmp" / f"binac-{name}-home"  # inside the host's tmpfs only
        self.faults = self.home / "faults"
        venv = Path(sys.prefix)
        hidden = [Path("/tmp"), repo, *hide, Path.home() / ".prefect"]
        if (editable := editable_root()) is not None:
            hidden.append(editable)
        self.env = {
            **env,
            "HOST_NAME": f"host-{name}",
            "HOST_CODE": str(self.code),
            "HOST_VENV": str(venv),
            "HOST_VENVS": ":".join(sorted({str(venv), str(venv.resolve())})),
            "HOST_HIDE": ":".join(str(p) for p in hidden),
            "BINAC_HOME": str(self.home),
            "BINAC_FAULT_DIR": str(self.faults),
            "PYTHONPATH": str(self.code),
        }
        self.proc: subprocess.Popen | None = None
        self.log = root / "host.log"

    def start(self) -> Host:
        argv = ["unshare", "--mount", "--pid", "--uts", "--fork", "--kill-child", "bash", "-c", SETUP]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                argv,
                cwd=self.root,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self

    def first_process(self) -> int | None:
        """The host pid of the namespace's first process (the child of `unshare`), once there is one."""
        assert self.proc is not None
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        with contextlib.suppress(OSError):
            found = children.read_text().split()
            return int(found[0]) if found else None
        return None

    def path(self, inside: str | Path) -> Path | None:
        """A path of the host's own file system, as this machine reaches it (None while it has no process)."""
        pid = self.first_process()
        return None if pid is None else Path(f"/proc/{pid}/root{Path(inside)}")

    def started(self) -> bool:
        """Whether the worker has started (its pid file is in the host's home); fails if the host ended."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"host {self.name} ended ({self.proc.returncode}): {self.log.read_text()[-3000:]}")
        pid_file = self.path(self.home / "serve" / "prefect-worker-1.pid")
        return pid_file is not None and pid_file.exists()

    def worker_log(self) -> str:
        """The tail of the worker's log in the host's home ('' once the host is gone)."""
        log = self.path(self.home / "serve" / "prefect-worker-1.log")
        with contextlib.suppress(OSError, AttributeError):
            return log.read_text()[-4000:]
        return ""

    def kill(self) -> None:
        """SIGKILL the host's `unshare` process group: its namespace and every process in it end."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(60)
