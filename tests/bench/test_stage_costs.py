"""bench/stage_costs.py's arithmetic on hand-made task runs (the Prefect query itself runs in docs' measurements)."""

from bench.stage_costs import breakdown, kind_of


def test_task_runs_are_sorted_into_kinds_by_their_task_name():
    assert kind_of("generate-rollouts-3da") == "generation"
    assert kind_of("refine-a1b") == "generation" and kind_of("sample-feedback-0") == "generation"
    assert kind_of("score-rewards-7f2") == "scoring" and kind_of("critic-reward-1") == "scoring"
    assert kind_of("update-critic-9") == "update" and kind_of("evaluate-2") == "evaluation"
    assert kind_of("log-metrics-4") == "storage and tracking" and kind_of("something-else-5") == "other tasks"


def test_orchestration_is_the_wall_time_the_task_runs_do_not_cover():
    got = breakdown(100.0, [("generate-rollouts-1", 30.0), ("refine-2", 10.0), ("update-actor-3", 25.0),
                            ("score-rewards-4", 5.0), ("log-metrics-5", 2.0)])
    assert got["generation"] == 40.0 and got["update"] == 25.0 and got["scoring"] == 5.0
    assert got["storage and tracking"] == 2.0 and got["orchestration"] == 28.0
    assert breakdown(10.0, [("update-actor-1", 12.0)])["orchestration"] == 0.0  # clock skew never goes negative
