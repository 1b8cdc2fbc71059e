"""Stage 5: the actor's (lower level's) policy-gradient update, θ → θ⁺ (`stage_functions.actor_update_stage`). It trains
on first attempts and, for methods with feedback, on refinements scored in their full (x, y0, z) context."""

from __future__ import annotations

from prefect import task

from binac_core.foundation.files import StageFile
from binac_core.model.stage_io import AdapterRef, read_scored_batch
from binac_core.rl import stage_functions
from binac_core.rl.update import AdapterUpdate
from tasks._common import CACHED, config, loaded


@task(name="update-actor", **CACHED)
def actor_update_task(
    cfg_d: dict,
    base: StageFile,
    seed: int,
    actor: AdapterRef,
    attempts: StageFile,
    first_rewards: StageFile,
    out_dir: str,
    refined: StageFile | None = None,
    refined_rewards: StageFile | None = None,
) -> AdapterUpdate:
    """θ⁺ saved into `out_dir/actor`. `refined` and `refined_rewards` only for methods that train the actor's second
    turn."""
    policy, _ = loaded(cfg_d, base, seed)
    scored = read_scored_batch(attempts, first_rewards, refined=refined, refined_rewards=refined_rewards)
    return stage_functions.actor_update_stage(policy, config(cfg_d), actor, scored, out_dir)
