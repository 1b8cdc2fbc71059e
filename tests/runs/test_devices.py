"""One worker per GPU, and runs that stay where their config places them.

`scripts/serve.py` with `BINAC_GPUS` starts each worker with its own `CUDA_VISIBLE_DEVICES`: here on a machine with
two simulated devices, the workers are real processes (a stand-in `prefect` that records the environment it was
started with), and `make worker` (`add-worker`) takes the device no live worker holds. `model.device`: `cpu` keeps
a run on the CPU where torch sees a GPU, `cuda` is refused in one line where it sees none, and the CPU presets say
`cpu`."""

import json
import os
import sys
import time

import pytest
from conftest import REPO

from binac_core.errors import BinacError
from binac_core.foundation.config import load_config, preset_names

sys.path.insert(0, str(REPO / "scripts"))
import serve  # noqa: E402

FAKE_PREFECT = """#!{python}
import json, os, sys, time
name = sys.argv[sys.argv.index("--name") + 1]
with open(os.path.join({out!r}, name + ".json"), "w") as f:
    json.dump({{"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"), "argv": sys.argv[1:]}}, f)
time.sleep(60)
"""


@pytest.fixture
def fake_workers(tmp_path, monkeypatch):
    """`serve`'s workers as stand-in processes under a fresh BINAC_HOME; every one started is stopped at the end."""
    bin_dir, out = tmp_path / "bin", tmp_path / "seen"
    bin_dir.mkdir()
    out.mkdir()
    fake = bin_dir / "prefect"
    fake.write_text(FAKE_PREFECT.format(python=sys.executable, out=str(out)))
    fake.chmod(0o755)
    monkeypatch.setattr(serve, "BIN", bin_dir)
    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    serve.state_dir().mkdir(parents=True)
    yield out
    serve.stop()


def seen(out, count: int) -> dict[str, dict]:
    """What each stand-in worker recorded, by its worker name, once `count` have."""
    deadline = time.time() + 60
    while len(list(out.glob("*.json"))) < count and time.time() < deadline:
        time.sleep(0.1)
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


def test_two_workers_on_two_devices_each_see_their_own(fake_workers, monkeypatch):
    monkeypatch.setenv("BINAC_GPUS", "0,1")
    monkeypatch.delenv("BINAC_WORKERS", raising=False)
    procs = serve.spawn_workers(dict(os.environ))
    got = seen(fake_workers, 2)
    assert len(procs) == 2 and sorted(v["CUDA_VISIBLE_DEVICES"] for v in got.values()) == ["0", "1"]
    assert {serve.read_pid(n) for n in ("prefect-worker-1", "prefect-worker-2")} == {p.pid for p in procs}
    assert (serve.state_dir() / "prefect-worker-2.device").read_text().strip() == "1"
    # one more worker (make worker) while both devices are held: refused; once worker 1 is gone, it takes device 0
    monkeypatch.setattr(serve, "read_env_sh", lambda: {"BINAC_PREFECT_PORT": "4200", "BINAC_MLFLOW_PORT": "5000"})
    with pytest.raises(SystemExit, match="every GPU of BINAC_GPUS"):
        serve.free_device()
    procs[0].kill()
    procs[0].wait()
    assert serve.free_device() == "0"


def test_more_workers_than_devices_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("BINAC_GPUS", "0,1")
    monkeypatch.setenv("BINAC_WORKERS", "3")
    with pytest.raises(SystemExit, match="^error: BINAC_WORKERS=3 but BINAC_GPUS lists 2 devices"):
        serve.worker_count()
    monkeypatch.delenv("BINAC_GPUS")
    assert serve.worker_count() == 3 and serve.gpus() == []


def test_without_a_device_list_workers_inherit_the_environment(fake_workers, monkeypatch):
    monkeypatch.delenv("BINAC_GPUS", raising=False)
    monkeypatch.setenv("BINAC_WORKERS", "2")
    serve.spawn_workers(dict(os.environ))
    assert [v["CUDA_VISIBLE_DEVICES"] for v in seen(fake_workers, 2).values()] == [None, None]


def test_the_device_override_keeps_a_run_on_the_cpu_beside_a_gpu(monkeypatch, tmp_path):
    """torch pretends to see a GPU: `cpu` stays on the CPU (a Policy is built there), `auto` would take the GPU;
    without one, `cuda` is refused in one line, by the plan before any compute."""
    from tiny_checkpoint import build_checkpoint

    from binac_core.model.policy import Policy, training_device
    from binac_core.runs.plans import plan

    assert all(load_config(n).model.device == "cpu" for n in preset_names() if load_config(n).model.source != "hub")
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert training_device("auto").type == "cuda" and training_device("cpu").type == "cpu"
    policy = Policy(build_checkpoint(tmp_path / "model", hostile=False), load_config("micro"), seed=0)
    assert policy.device.type == "cpu" and {p.device.type for p in policy.model.parameters()} == {"cpu"}
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert training_device("auto").type == "cpu"
    with pytest.raises(BinacError, match="^model.device=cuda: torch sees no CUDA device here"):
        plan("micro", "grpo", 1, 0, {"model.device": "cuda"}, None)
    assert load_config("micro").digest() == load_config("micro", {"model.device": "cuda"}).digest()
    assert load_config("micro").base_digest() == load_config("micro", {"model.device": "auto"}).base_digest()
