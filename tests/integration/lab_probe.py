"""A probe flow for tests/integration/test_lab.py, and its submitter.

`probe` runs on a lab worker: one cached task with a persisted result (so its result goes to the result storage
the flow run's environment names), and a note in the flow run's `$BINAC_HOME` saying which home, working
directory and code file the run had. Run as a script (with a lab file's variables in the environment), it deploys
`probe` on the lab's pool with the pull steps and job variables of the lab's `train/micro` deployment, starts one
flow run, waits for it to end and prints JSON: that deployment's pull steps and job variables, and the run's
final state. It imports nothing of binac, so a worker's code copy needs only this file."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import INPUTS

NOTE = "lab-probe.json"


@task(persist_result=True, cache_policy=INPUTS)
def where(token: str) -> dict:
    return {"token": token, "home": os.environ["BINAC_HOME"], "cwd": os.getcwd(), "file": str(Path(__file__).resolve())}


@flow(name="lab-probe", persist_result=True)
def probe(token: str) -> dict:
    seen = where(token)
    Path(seen["home"], NOTE).write_text(json.dumps(seen))
    return seen


def submit(token: str, timeout: float = 300) -> dict:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        lab = client.read_deployment_by_name("train/micro")
        flow_id = client.create_flow_from_name("lab-probe")
        deployment = client.create_deployment(
            flow_id,
            "probe",
            entrypoint=f"{Path(__file__).relative_to(Path(__file__).parents[2]).as_posix()}:probe",
            work_pool_name=lab.work_pool_name,
            pull_steps=lab.pull_steps,
            job_variables=lab.job_variables,
        )
        run = client.create_flow_run_from_deployment(deployment, parameters={"token": token})
        deadline = time.time() + timeout
        while not (state := client.read_flow_run(run.id).state).is_final() and time.time() < deadline:
            time.sleep(1)
    return {
        "pull_steps": lab.pull_steps,
        "job_variables": lab.job_variables,
        "pool": lab.work_pool_name,
        "state": state.type.value,
        "message": state.message,
    }


if __name__ == "__main__":
    print(json.dumps(submit(sys.argv[1])))
