"""The in-memory loop (`binac_core.rl.loop.iteration`) gives the Prefect flow's numbers, for every method: the same
stored rows (attempts, feedback, refinements and their rewards, critic rewards), the same look-ahead rewards, the
same logged losses and bit-identical adapters, against the session's micro comparison (`micro_compare`: seed 0,
one iteration of each method trained on its second turn, five of grpo and critic_only), from its initial adapters
and on its base model. Another seed gives other numbers, so the comparison can fail."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from binac_core.benchmarks.problems import load_problems
from binac_core.foundation.config import load_config
from binac_core.foundation.files import file_digest
from binac_core.foundation.workspace import Workspace
from binac_core.model.runtime import policy_and_backend
from binac_core.model.stage_io import AdapterRef
from binac_core.rl.loop import IterationResult, iteration
from binac_core.rl.methods import METHODS, method_spec
from binac_core.store import sqlrun, tracking

SEED = 0
STEPS = {"grpo": 2, "critic_only": 2}
"""Iterations compared (the comparison ran 5 of these two: a second one carries the optimizer state over); 1 else."""


def _run_dir(home: Path, method: str) -> Path:
    (run,) = [d for d in (home / "runs").iterdir() if d.name.startswith(f"{method}-s{SEED}-")]
    return run


def initial_adapters(home: Path) -> dict[str, AdapterRef]:
    """The comparison's initial actor and critic (every method starts from them)."""
    (init,) = list((home / "runs").glob(f"init-*-s{SEED}"))
    return {name: AdapterRef(name, str(init / name), file_digest(init / name)) for name in ("actor", "critic")}


def run_loop(
    base: Path, home: Path, method: str, steps: int, seed: int = SEED, folder: Path | None = None
) -> tuple[list[IterationResult], dict]:
    """`steps` iterations of the loop from the comparison's initial adapters, in memory (or saving the adapters
    under `folder/step-<k>`); the results and the final adapters' tensors as the policy holds them."""
    cfg = load_config("micro")
    policy, backend = policy_and_backend(base, cfg, SEED)
    refs, rows, out = initial_adapters(home), load_problems(cfg, "train"), []
    actor, critic = refs["actor"], refs["critic"]
    for step in range(1, steps + 1):
        at = None if folder is None else folder / f"step-{step:05d}"
        out.append(iteration(policy, backend, cfg, method_spec(method), rows, seed, step, actor, critic, at))
        actor, critic = out[-1].actor, out[-1].critic
    policy.sync(actor), policy.sync(critic)  # no-ops: held in memory (`Policy.hold`) or the initial ones
    return out, {name: policy.adapter_state(name) for name in ("actor", "critic")}


def loop_rows(res: IterationResult) -> list[tuple]:
    """The stored row's columns compared, as the loop's records give them (one per feedback, else per attempt)."""
    first = {
        (a.problem_id, a.sample_idx): (a.text, r) for a, r in zip(res.attempts, res.first_rewards.rewards, strict=True)
    }
    if res.feedback is None:
        return sorted(((pid, k, 0, *first[(pid, k)], None, None, None, None) for pid, k in first), key=repr)
    critic = res.critic_rewards
    return sorted(
        (
            (
                f.problem_id,
                f.sample_idx,
                f.feedback_idx,
                *first[(f.problem_id, f.sample_idx)],
                f.text,
                y.text,
                r1,
                critic[i],
            )
            for i, (f, y, r1) in enumerate(zip(res.feedback, res.refined, res.refined_rewards.rewards, strict=True))
        ),
        key=repr,
    )


def flow_rows(home: Path, method: str, step: int) -> list[tuple]:
    df = sqlrun.run(
        Workspace(home),
        "SELECT problem_id, sample_idx, feedback_idx, attempt, attempt_reward, feedback, "
        "refined, refined_reward, critic_reward FROM trajectories WHERE split = 'train' "
        f"AND method = '{method}' AND step = {step}",
    )
    return sorted((tuple(None if pd.isna(v) else v for v in row) for row in df.itertuples(index=False)), key=repr)


def flow_metrics(home: Path, method: str, step: int) -> dict[str, float]:
    """The run's logged update statistics at `step` (`UPDATE_METRICS`)."""
    ws = Workspace(home)
    (run_id,) = sqlrun.run(ws, f"SELECT DISTINCT run_id FROM trajectories WHERE method = '{method}'")["run_id"]
    c = tracking.client(ws)
    return {key: m.value for key in UPDATE_METRICS for m in c.get_metric_history(run_id, key) if m.step == step}


def flow_adapter(home: Path, method: str, name: str, step: int) -> dict[str, torch.Tensor]:
    """Adapter `name` after iteration `step`: the latest update's folder up to it, else the initial one."""
    run = _run_dir(home, method)
    saved = [run / f"step-{s:05d}" / name for s in range(1, step + 1) if (run / f"step-{s:05d}" / name).exists()]
    folder = saved[-1] if saved else Path(initial_adapters(home)[name].path)
    return load_file(str(folder / "adapter_model.safetensors"))


UPDATE_METRICS = (
    "train/actor_loss",
    "train/kl",
    "train/critic_loss",
    "train/actor_entropy",
    "train/critic_entropy",
    "train/actor_skipped_steps",
    "train/critic_skipped_steps",
)
"""The update statistics flows/train.py logs each iteration (where the update ran)."""


def loop_metrics(res: IterationResult) -> dict[str, float]:
    named = {"train/actor_loss": res.actor_loss, "train/kl": res.kl, "train/critic_loss": res.critic_loss}
    for model, upd in (("actor", res.actor_update), ("critic", res.critic_update)):
        if upd is not None:
            named |= {f"train/{model}_entropy": upd.entropy, f"train/{model}_skipped_steps": upd.skipped_steps}
    return {k: v for k, v in named.items() if v is not None}


def lookahead(home: Path, method: str, step: int) -> tuple[list[str], list[float]] | None:
    folder = _run_dir(home, method) / f"step-{step:05d}"
    if not (folder / "lookahead.json").exists():
        return None
    texts = [y["text"] for y in json.loads((folder / "lookahead.json").read_text())]
    return texts, json.loads((folder / "lookahead.rewards.json").read_text())


def differences(base: Path, home: Path, method: str) -> list[str]:
    """What differs between the loop's iterations and the flow's, for `method` (empty: nothing)."""
    steps = STEPS.get(method, 1)
    results, adapters = run_loop(base, home, method, steps)
    found = []
    for step, res in enumerate(results, start=1):
        if loop_rows(res) != flow_rows(home, method, step):
            found.append(f"step {step}: stored rows")
        ahead = None if res.lookahead is None else ([y.text for y in res.lookahead], res.lookahead_rewards.rewards)
        if ahead != lookahead(home, method, step):
            found.append(f"step {step}: look-ahead refinements")
        if loop_metrics(res) != flow_metrics(home, method, step):
            found.append(f"step {step}: losses {loop_metrics(res)} vs {flow_metrics(home, method, step)}")
    for name, state in adapters.items():
        saved = flow_adapter(home, method, name, steps)
        if state.keys() != saved.keys() or not all(torch.equal(state[k], saved[k]) for k in state):
            found.append(f"adapter {name}")
    return found


@pytest.mark.parametrize("method", METHODS)
def test_the_loop_gives_the_flows_numbers(micro_compare, micro_base, method):
    assert differences(micro_base, micro_compare["home"], method) == []


def test_another_seed_gives_other_numbers(micro_compare, micro_base):
    """The comparison above can fail: seed 1 samples other problems or attempts and ends with another actor,
    unless neither batch had reward spread (on micro one can lack it: a batch without signal takes no optimizer
    step, so both actors are then the initial one), and the actors compared were trained."""
    home = micro_compare["home"]
    (res,), adapters = run_loop(micro_base, home, "grpo", 1, seed=1)
    assert loop_rows(res) != flow_rows(home, "grpo", 1)
    initial = load_file(str(Path(initial_adapters(home)["actor"].path) / "adapter_model.safetensors"))
    saved = flow_adapter(home, "grpo", "actor", 1)

    def moved(tensors):
        return not all(torch.equal(tensors[k], v) for k, v in initial.items())

    assert moved(adapters["actor"]) == (res.actor_update.skipped_steps == 0)
    if moved(adapters["actor"]) or moved(saved):
        assert not all(torch.equal(adapters["actor"][k], saved[k]) for k in saved)
    compared = flow_adapter(home, "grpo", "actor", STEPS["grpo"])
    assert not all(torch.equal(compared[k], v) for k, v in initial.items()), "grpo's compared actor was trained"


def test_saving_the_adapters_gives_the_same_numbers(micro_compare, micro_base, tmp_path):
    """With a folder the loop saves the updated adapters as the update stages do: the same rows and tensors."""
    home = micro_compare["home"]
    (res,), _ = run_loop(micro_base, home, "binac", 1, folder=tmp_path)
    assert loop_rows(res) == flow_rows(home, "binac", 1)
    for ref in (res.actor, res.critic):
        assert ref.path == str(tmp_path / "step-00001" / ref.name)
        saved, flow = load_file(f"{ref.path}/adapter_model.safetensors"), flow_adapter(home, "binac", ref.name, 1)
        assert saved.keys() == flow.keys() and all(torch.equal(saved[k], flow[k]) for k in saved)
