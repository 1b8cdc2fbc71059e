"""The comparison report (binac_core/reports/report.py, `binac compare`) on hand-made runs: a method whose seeds
split gets its per-seed values in seed order, and the greedy protocol is a column named in the text where some run
evaluated it."""

from binac_core.reports.report import build_report

META = {
    "preset": "micro",
    "seeds": [0, 1, 2],
    "budget": 4,
    "steps": 1,
    "n_eval": 2,
    "eval_samples": 1,
    "eval_temperature": 1.0,
}


def _run(method: str, seed: int, single: float, greedy: float | None = None) -> dict:
    final = {"eval/acc_single": single, "eval/acc_feedback": 0.5, "eval/acc_gated_k2": 0.5}
    if greedy is not None:
        final["eval/acc_single_greedy"] = greedy
    return {"method": method, "seed": seed, "samples_per_iteration": 4, "evals": {0: final, 1: final}}


def _row(text: str, method: str) -> list[str]:
    return next(line for line in text.splitlines() if line.startswith(f"| {method} |")).split(" | ")


def test_a_method_whose_seeds_split_gets_its_values_seed_by_seed(tmp_path):
    """grpo's final acc_single is 91.1, 0.4 and 88.5 % on seeds 2, 0, 1 (given in that order): mean 60.0,
    t-interval t(0.975, 2)·51.6/√3 = 128.3, then the values in seed order; binac's seeds lie within 2 points."""
    runs = [
        _run("grpo", 2, 0.911),
        _run("grpo", 0, 0.004),
        _run("grpo", 1, 0.885),
        *(_run("binac", s, 0.40 + 0.01 * s) for s in (0, 1, 2)),
    ]
    text = build_report(runs, META, tmp_path)["text"]
    assert _row(text, "grpo")[2] == "60.0 ± 128.3 (per seed: 0.4, 88.5, 91.1)"
    assert _row(text, "binac")[2] == "41.0 ± 2.5"
    assert "its per-seed values follow in seed order" in text


def test_the_greedy_protocol_is_a_column_named_in_the_report_where_evaluated(tmp_path):
    runs = [_run(m, s, 0.3, greedy=1.0) for m in ("grpo", "binac") for s in (0, 1, 2)]
    text = build_report(runs, META, tmp_path / "greedy")["text"]
    header = _row(text, "method")
    assert header[2:4] == ["acc_single", "acc_single_greedy"]
    assert _row(text, "binac")[3] == "100.0 ± 0.0"
    assert "`acc_single_greedy` = single-turn, greedy (actor alone, one answer per problem at temperature 0" in text
    assert (
        "`acc_single_greedy`: one answer per problem at temperature 0, beside `acc_single` at temperature 1.0" in text
    )
    plain = build_report([_run("grpo", s, 0.3) for s in (0, 1)], META, tmp_path / "plain")["text"]
    assert "acc_single_greedy" not in plain
