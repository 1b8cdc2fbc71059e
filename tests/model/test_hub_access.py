"""The model hub is the product's to reach: neither the Makefile, nor prefect.yaml's job environment, nor `make serve`
switches it off (HF_HUB_OFFLINE is set by the tests, tests/conftest.py, and by CI's machine setup, .ci/run). A GPU
preset's hub id is fetched where the environment allows it: the download request is made, answered here by a mock
at the network boundary (huggingface_hub's httpx client), and it is not made under HF_HUB_OFFLINE=1."""

import json
import os
import subprocess
import sys

import yaml
from conftest import REPO

HUB_ID = "meta-llama/Llama-3.2-1B-Instruct"

# The child loads the GPU preset's model the way a run does (base_model, then Policy), every request answered by a
# connection error after it is recorded; it prints the requested URLs.
CHILD = """
import json, sys
import httpx, huggingface_hub
seen = []
def refuse(request):
    seen.append(str(request.url))
    raise httpx.ConnectError("no network in this test", request=request)
huggingface_hub.set_client_factory(lambda: httpx.Client(transport=httpx.MockTransport(refuse)))
from binac_core.foundation.config import load_config
from binac_core.foundation.workspace import Workspace
from binac_core.model.base_model import base_model
from binac_core.model.policy import Policy
cfg = load_config("llama1b-math", {"model.device": "cpu"})
base = base_model(cfg, Workspace(sys.argv[1]))
try:
    Policy(base.path, cfg)
    outcome = "loaded"
except Exception as exc:
    outcome = type(exc).__name__
print(json.dumps({"base": base.path, "urls": seen, "outcome": outcome}))
"""


def deployment_env(home) -> dict:
    """The environment a deployment's flow run starts with: this process's without the tests' HF_HUB_OFFLINE (a
    worker on a machine with a hub), then prefect.yaml's job variables, placeholders filled as `prefect deploy`
    fills them."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    spec = yaml.safe_load((REPO / "prefect.yaml").read_text())
    job = spec["definitions"]["work_pools"]["binac_local"]["job_variables"]["env"]
    fill = {"{{ $PWD }}": str(REPO), "{{ $BINAC_HOME }}": str(home)}
    for key, value in job.items():
        for placeholder, real in fill.items():
            value = value.replace(placeholder, real)
        env[key] = value
    return {**env, "HF_HOME": str(home / "hf"), "PYTHONPATH": str(REPO)}


def load_in_child(env: dict, home) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(home)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_neither_make_nor_deployments_nor_make_serve_switch_the_hub_off(monkeypatch):
    job = yaml.safe_load((REPO / "prefect.yaml").read_text())["definitions"]["work_pools"]["binac_local"]
    assert "HF_HUB_OFFLINE" not in job["job_variables"]["env"]
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    made = subprocess.run(["make", "-pn", "stop"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0 and "HF_HUB_OFFLINE" not in made.stdout, made.stderr
    sys.path.insert(0, str(REPO / "scripts"))
    import serve

    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert "HF_HUB_OFFLINE" not in serve.run_env(4200, 5000)


def test_a_gpu_presets_hub_id_is_fetched_where_the_environment_allows_it(tmp_path):
    got = load_in_child(deployment_env(tmp_path), tmp_path)
    assert got["base"] == HUB_ID and got["outcome"] != "loaded"
    assert any(f"/{HUB_ID}/" in url for url in got["urls"]), got["urls"]
    offline = load_in_child({**deployment_env(tmp_path), "HF_HUB_OFFLINE": "1"}, tmp_path)
    assert offline["urls"] == [] and offline["outcome"] != "loaded"
