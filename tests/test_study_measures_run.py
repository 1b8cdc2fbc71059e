"""sql/study_measures.sql against a real micro training run of a feedback method with a trained critic (`binac`,
2 iterations): every column equals the MLflow metric of the same name and step, train/<name> for the training
iterations and eval/<name> for the held-out `feedback` protocol. (Hand-computed values on planted stores:
test_study_measures.py.)"""

import pytest
from conftest import REPO, binac_env, run_binac

from binac_core import sqlrun, tracking
from binac_core.workspace import Workspace

pytestmark = pytest.mark.integration

MEASURES = (REPO / "sql" / "study_measures.sql").read_text()
TRAIN = ("zero_adv_frac", "refine_zero_adv_frac", "critic_hits_first_error", "critic_false_alarm",
         "critic_approves_wrong", "critic_signal", "critic_useful_mixed_frac", "critic_signal_frac", "feedback_gain")
EVAL = ("critic_hits_first_error", "critic_false_alarm", "critic_approves_wrong")


@pytest.fixture(scope="module")
def binac_run(tmp_path_factory, prefect_home) -> Workspace:
    home = tmp_path_factory.mktemp("binac-home-measures")
    run_binac(["train", "--preset", "micro", "--method", "binac", "--steps", "2", "--seed", "0"],
              binac_env(home, prefect_home))
    return Workspace(home)


def _compare(ws: Workspace, split: str, names: tuple[str, ...]) -> set[str]:
    """Assert each SQL value equals the MLflow metric `<split>/<name>` at its step (a NULL: no metric there);
    return the names compared on a value at least once."""
    df = sqlrun.run(ws, MEASURES, {"comparison": "all", "split": split})
    assert len(df) > 0
    c, compared = tracking.client(ws), set()
    for row in df.itertuples(index=False):
        for name in names:
            history = {m.step: m.value for m in c.get_metric_history(row.run_id, f"{split}/{name}")}
            value = getattr(row, name)
            if value is None or value != value:  # NULL: the run logs no such metric at this step
                assert row.step not in history, (split, name, row.step)
                continue
            assert history[row.step] == pytest.approx(value), (split, name, row.step)
            compared.add(name)
    return compared


def test_the_study_measures_in_sql_equal_the_mlflow_metrics_of_a_micro_run(binac_run):
    compared = _compare(binac_run, "train", TRAIN)
    # the measures every feedback step of a synthetic run has (the others need a row in their denominators)
    assert {"zero_adv_frac", "refine_zero_adv_frac", "critic_hits_first_error", "critic_approves_wrong",
            "critic_useful_mixed_frac", "critic_signal_frac", "feedback_gain"} <= compared, compared
    assert "critic_hits_first_error" in _compare(binac_run, "eval", EVAL)
