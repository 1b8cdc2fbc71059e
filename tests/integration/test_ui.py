"""The MLflow UI as a new user meets it after a comparison: a real MLflow server over the store of a
real micro comparison, driven in headless Chromium by `scripts/ui_check.py` (what `make ui-check` runs), which
fails with the first check that does not hold. Chromium is Debian's package (`.ci/run` installs it)."""

import sys

import pytest
from conftest import REPO, binac_env, home_with_micro_base, run_binac

sys.path.insert(0, str(REPO / "scripts"))
import ui_check  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.mark.timeout(1800)
@pytest.mark.needs_tool("chromium")
def test_the_mlflow_ui_opens_on_the_runs_and_compares_at_equal_actor_samples(
    tmp_path_factory, micro_compare, prefect_home
):
    home = home_with_micro_base(tmp_path_factory, "binac-home-ui", micro_compare)
    # 96 actor samples: 6 grpo iterations (16 each: B 4 x G 4) and 2 fixed_critic and 2 binac ones (48 each: the
    # 16 attempts and 32 refinements the actor trains on; binac's look-ahead refinements are not counted). The
    # counts all three reach are the multiples of 48 up to 96 (plans.shared_eval_samples), and 0.
    run_binac(ui_check.SMALL_COMPARISON, binac_env(home, prefect_home))

    seen = ui_check.check(home, home / "ui-check")  # raises, naming the check, if the UI does not show it

    methods = ("grpo", "fixed_critic", "binac")
    assert seen["parent"] == "compare-micro-96samples"
    assert seen["children"] == sorted(f"{m}-micro-s{s}" for m in methods for s in (0, 1))
    assert all(points == [0, 48, 96] for points in seen["points"].values()), seen["points"]
    for m in methods:
        assert {f"summary/{m}/acc_single", f"summary/{m}/acc_single_ci95"} <= set(seen["parent_metrics"])
    for png in seen["files"]:
        assert png.stat().st_size > 20_000, png  # a drawn page, not a blank one
