"""Stage 5: the actor's (lower level's) policy-gradient update, θ → θ⁺, on first attempts and, for methods
with feedback, on refinements scored in their full (x, y0, z) context."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from prefect import task

from binac_core.batches import attempt_samples, refinement_rewards, refinement_samples
from binac_core.files import read_json
from binac_core.update import policy_update
from tasks._common import CACHED, config, loaded, ref


@task(name="update-actor", **CACHED)
def update_actor(
    cfg_d: dict, base: dict, seed: int, actor: dict, attempts: dict, r0: dict, out_dir: str,
    refined: dict | None = None, r1: dict | None = None,
) -> dict:
    cfg = config(cfg_d)
    policy, _ = loaded(cfg_d, base, seed)
    policy.sync(ref(actor))
    policy.loaded.pop("actor")  # in-memory weights change below: force a re-sync if this task fails mid-way
    att, rew0 = read_json(attempts), read_json(r0)
    samples = attempt_samples(att, rew0, cfg.train.scale_rewards)
    if refined is not None:
        ref_recs, rew1 = read_json(refined), read_json(r1)
        shaped = refinement_rewards(ref_recs, att, rew0, rew1, cfg.train.alpha_shaping)
        samples += refinement_samples(ref_recs, shaped, cfg.train.scale_rewards)
    stats = policy_update(policy, "actor", samples, cfg.train.t_low, cfg.train.kl_coef)
    new = policy.save("actor", Path(out_dir) / "actor")
    return {"adapter": asdict(new), "stats": stats}
