"""Stage 5: the actor's (lower level's) policy-gradient update, θ → θ⁺, on first attempts and, for methods
with feedback, on refinements scored in their full (x, y0, z) context."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from binac_core.foundation.files import StageFile
from binac_core.model.stage_io import AdapterRef, AdapterRole, read_scored_batch
from binac_core.rl.batches import actor_samples
from binac_core.rl.update import AdapterUpdate, UpdateSettings, update_adapter
from tasks._common import CACHED, config, loaded


@task(name="update-actor", **CACHED)
def update_actor(
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
    """`refined` and `refined_rewards` only for methods that train the actor's second turn."""
    cfg = config(cfg_d)
    policy, _ = loaded(cfg_d, base, seed)
    scored = read_scored_batch(attempts, first_rewards, refined=refined, refined_rewards=refined_rewards)
    samples = actor_samples(scored, cfg.train.scale_rewards, cfg.train.alpha_shaping)
    return update_adapter(
        policy, actor, samples, UpdateSettings.of(cfg, AdapterRole.ACTOR), Path(out_dir) / AdapterRole.ACTOR
    )
