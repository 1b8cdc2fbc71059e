"""Stage 5: the actor's (lower level's) policy-gradient update, θ → θ⁺, on first attempts and, for methods
with feedback, on refinements scored in their full (x, y0, z) context."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from prefect import task

from binac_core.batches import actor_samples
from binac_core.files import read_json, read_optional
from binac_core.generation import adapter_ref
from binac_core.update import update_adapter
from tasks._common import CACHED, config, loaded


@task(name="update-actor", **CACHED)
def update_actor(
    cfg_d: dict, base: dict, seed: int, actor: dict, attempts: dict, r0: dict, out_dir: str,
    refined: dict | None = None, r1: dict | None = None,
) -> dict:
    train = config(cfg_d).train
    policy, _ = loaded(cfg_d, base, seed)
    samples = actor_samples(read_json(attempts), read_json(r0), train.scale_rewards, read_optional(refined),
                            read_optional(r1), train.alpha_shaping)
    new, stats = update_adapter(policy, adapter_ref(actor), samples, train.t_low, train.kl_coef,
                                Path(out_dir) / "actor")
    return {"adapter": asdict(new), "stats": stats}
