"""The study report (binac_core/studies/study_report.py) on hand-made runs: the equal-budget points and the exact counts
they are labelled with on both axes, the pre-registered verdict rules (H6's margin rule included), a pilot's
choice of variants with a tie, the `select` key of a study file, and a report whose hypotheses lack data. No
model, no Prefect, no MLflow: the run dicts are what flows/study.py's `collect` returns."""

import math

import pytest
import yaml

from binac_core.errors import BinacError
from binac_core.foundation.stats import wilson_interval
from binac_core.studies.run_values import budget_point
from binac_core.studies.study import equal_budget_totals, load_study
from binac_core.studies.study_report import BaseIdentity, build_study_report, choose_variant
from binac_core.studies.verdicts import NO_DATA, claim, margin_verdict

# The design's per-iteration counts (B = 8, G = 8, K = 4): (actor training, generated).
PER = {
    "grpo": (64, 64),
    "fixed_critic": (320, 576),
    "critic_only": (0, 832),
    "binac": (320, 832),
    "binac_after": (320, 832),
    "binac_lam0": (320, 576),
}
SIZES = {"train.batch_problems": 8, "train.group_size": 8, "train.critic_group_size": 4}
ACCURACY = {"grpo": 0.20, "fixed_critic": 0.30, "critic_only": 0.10, "binac": 0.40, "binac_after": 0.35}


def _study(tmp_path, **edit):
    raw = {
        "name": "report-test",
        "preset": "micro",
        "iterations": 60,
        "eval_every": 10,
        "equal_samples_method": "grpo",
        "methods": ["grpo", "fixed_critic", "critic_only", "binac", "binac_after"],
        "seeds": [0, 1, 2],
        "regimes": {"moderate": {"rule": {"single_closest_to": 0.35, "search": [2, 3]}}, "sparse": {"difficulty": 2}},
        "rule_measure": {"group_size": 8, "seed": 0},
        "overrides": SIZES,
        **edit,
    }
    path = tmp_path / f"{raw['name']}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_study(path)


def _eval_steps(method: str, iterations: int, total: int, every: int = 10) -> list[int]:
    """What a run evaluates at: step 0, every `every` iterations, the last, and both equal-budget points."""
    steps = set(range(0, iterations + 1, every)) | {iterations}
    steps |= {math.ceil(total / per) for per in PER[method] if per and math.ceil(total / per) <= iterations}
    return sorted(steps)


def _run(
    method: str,
    seed: int,
    regime: str,
    iterations: int = 60,
    total: int = 3840,
    variant: str = "",
    evals: dict | None = None,
    finished: bool = True,
) -> dict:
    """A finished run with hand-chosen metrics: held-out accuracy climbing linearly to the method's level (plus a
    small per-seed offset), binac's critic learning (hits 0.20 → 0.30, the frozen critic staying at 0.20) and its
    approval drifting by 0, 1, 2 points over seeds 0, 1, 2; at iteration 1 GRPO's groups 60 % zero-advantage, the
    refinement groups 30 %."""
    steps = _eval_steps(method, iterations, total)
    base, jitter = ACCURACY.get(method, 0.2), 0.003 * ((seed * 7 + len(method)) % 3)
    metrics = {
        "eval/acc_single": {s: 0.1 + (base - 0.1) * s / iterations + jitter for s in steps},
        "eval/acc_feedback": {s: 0.12 + (base - 0.1) * s / iterations + jitter for s in steps},
        "eval/acc_gated_k2": {s: 0.5 for s in steps},
        "train/zero_adv_frac": {i: 0.6 if method == "grpo" else 0.55 for i in range(1, iterations + 1)},
        "train/critic_signal": {i: 0.1 for i in range(1, iterations + 1)},
    }
    if method != "grpo":
        metrics |= {
            "train/refine_zero_adv_frac": {i: 0.3 for i in range(1, iterations + 1)},
            "eval/critic_hits_first_error": {
                s: 0.2 + (0.1 * s / iterations if method == "binac" else 0) for s in steps
            },
            "eval/critic_approves_wrong": {
                s: 0.1 + (0.01 * seed * s / iterations if method == "binac" else 0) for s in steps
            },
        }
    if method in ("binac", "binac_after", "critic_only"):
        metrics["eval/frozen_critic_hits_first_error"] = {s: 0.2 for s in steps}
    for name, values in (evals or {}).items():
        metrics[f"eval/{name}"] = values
    return {
        "regime": regime,
        "difficulty": 2,
        "method": method,
        "variant": variant,
        "seed": seed,
        "overrides": {},
        "finished": finished,
        "run_id": f"{regime}-{method}-{variant}-{seed}",
        "state": "done",
        "notes": "",
        "metrics": metrics,
        "actor_train_per_iteration": PER[method][0],
        "generated_per_iteration": PER[method][1],
    }


MEASURED = {
    2: {
        "single": 0.04,
        "all_wrong_frac": 0.62,
        "zero_adv_frac": 0.66,
        **{
            f"{s}{x}": v
            for s in ("initial_critic", "oracle", "self_correct", "approve")
            for x, v in (("", 0.05), ("_fixed", 0.02), ("_broken", 0.01))
        },
        "shortcut_n": 400,
        "shortcut_right": 0.005,
        "shortcut_copy": 0.97,
        "critic_approved_wrong_n": 50,
        "critic_approved_wrong_right": 0.02,
        "critic_hits_first_error": 0.3,
        "critic_false_alarm": 0.1,
        "critic_agrees_with_oracle": 0.25,
    },  # no critic_approves_wrong: a measurement from before it existed
    3: {"single": 0.33, "all_wrong_frac": 0.1, "zero_adv_frac": 0.2},  # no bounds measured
}


def _section(text: str, start: str, end: str = "\n\n**") -> str:
    part = text[text.index(start) :]
    return part[: part.index(end, len(start))]


def _hypothesis(text: str, tag: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"- **{tag}**"))


# --------------------------------------------------------------------------- the equal-budget points


def test_the_equal_budget_point_is_the_first_evaluation_whose_count_reaches_the_total(tmp_path):
    st = _study(tmp_path)
    assert equal_budget_totals(st) == {"actor_train": 3840, "generated": 3840}
    fixed, binac, critic_only, grpo = (_run(m, 0, "sparse") for m in ("fixed_critic", "binac", "critic_only", "grpo"))
    assert budget_point(fixed, "actor_train", 3840) == (12, 3840)
    assert budget_point(fixed, "generated", 3840) == (7, 4032), "the exact count reached, not the nominal total"
    assert budget_point(binac, "generated", 3840) == (5, 4160)
    assert budget_point(critic_only, "actor_train", 3840) is None, "its actor never trains"
    assert budget_point(grpo, "actor_train", 3840) == budget_point(grpo, "generated", 3840) == (60, 3840)
    short = _run("fixed_critic", 0, "sparse", evals={"acc_single": {0: 0.1, 10: 0.2}})
    assert budget_point(short, "actor_train", 3840) is None, "a run whose evaluations stop short never reaches it"


def test_the_equal_budget_point_reads_the_logged_running_totals_under_an_alternation():
    """A 3:1 alternation (three actor iterations, then one critic iteration) adds no actor training samples at its
    critic iterations: 64 per actor iteration reach 3840 at iteration 80, not at iteration 60."""
    run = _run("binac", 0, "sparse", iterations=80, evals={"acc_single": {s: 0.5 for s in range(0, 81, 10)}})
    run["actor_train_per_iteration"] = 64
    run["metrics"]["train/actor_samples"] = {i: 64 * (i - i // 4) for i in range(81)}
    assert budget_point(run, "actor_train", 3840) == (80, 3840)
    del run["metrics"]["train/actor_samples"]
    assert budget_point(run, "actor_train", 3840) == (60, 3840), "without logged totals: iteration x per iteration"


def test_every_row_is_labelled_with_the_iteration_and_the_counts_that_method_reached(tmp_path):
    st = _study(tmp_path)
    runs = [_run(m, s, r) for r in ("moderate", "sparse") for m in st.methods for s in st.seeds]
    text = build_study_report(st, MEASURED, {"moderate": 3, "sparse": 2}, [], runs, tmp_path / "out")["text"]
    sparse = text[text.index("## Regime `sparse`") :]
    actor = _section(sparse, "**At (b)")
    generated = _section(sparse, "**At (c)")
    # | method | iteration | actor training samples | generated samples | acc ...
    assert "| fixed_critic | 12 | 3840 | 6912 |" in actor
    assert "| binac | 12 | 3840 | 9984 |" in actor
    assert "| critic_only | never (actor not trained) | – | – |" in actor
    assert "| grpo | 60 | 3840 | 3840 |" in actor
    assert "| fixed_critic | 7 | 2240 | 4032 |" in generated
    assert "| binac | 5 | 1600 | 4160 |" in generated
    assert "| critic_only | 5 | 0 | 4160 |" in generated
    assert "| binac | 60 | 19200 | 49920 |" in _section(sparse, "**At (a)")
    protocol = _section(text, "## Protocol", "\n## ")
    assert "| fixed_critic | 320 | 576 | 19200, 34560 | 12 (3840) | 7 (4032) |" in protocol
    assert "| critic_only | 0 | 832 | 0, 49920 | never (actor not trained) | 5 (4160) |" in protocol
    assert "**3840 actor training samples** and **3840 generated samples**" in protocol


# --------------------------------------------------------------------------- regimes and the shortcut check


def test_the_regimes_section_names_each_rule_and_the_shortcut_check_with_its_wilson_interval(tmp_path):
    st = _study(tmp_path)
    text = build_study_report(st, MEASURED, {"moderate": 3, "sparse": 2}, [], [], tmp_path / "out")["text"]
    assert "`moderate` = difficulty 3: rule `single_closest_to: 0.35`" in text
    assert "`sparse` = difficulty 2: fixed in the study file" in text
    lo, hi = wilson_interval(2, 400)  # round(0.005 * 400) = 2 of 400
    assert f"| sparse (d2) | 400 | 0.5 % [{100 * lo:.1f}, {100 * hi:.1f}] (2 of 400) | 97.0 % | 50 |" in text
    lo, hi = wilson_interval(1, 50)
    assert f"2.0 % [{100 * lo:.1f}, {100 * hi:.1f}] (1 of 50)" in text
    assert "| sparse (d2) | 30.0 % | 10.0 % | – | – | 25.0 % |" in text, "a measure not measured shows –"
    assert "| moderate (d3) | 33.0 % | – | – | – | – |" in text, "no bounds measured there"
    assert "approval" in _section(text, "Bounds of feedback", "\n\n**The shortcut")


# --------------------------------------------------------------------------- verdicts


def test_h6_margin_rule_on_hand_made_differences():
    assert margin_verdict((0.01, 0.02, 5), 0.05) == "supported", "upper end 0.03 < 0.05"
    assert margin_verdict((0.06, 0.02, 5), 0.05) == "not supported", "lower end 0.04 > 0, upper end 0.08"
    assert margin_verdict((0.03, 0.04, 5), 0.05) == "inconclusive", "[-0.01, 0.07]"
    assert margin_verdict((-0.10, 0.02, 5), 0.05) == "supported", "a fall is no drift"
    assert margin_verdict((0.02, 0.01, 5), 0.05) == "not supported", "[0.01, 0.03]: a significant rise is checked first"
    assert margin_verdict((0.04, 0.01, 5), 0.05) == "not supported", "[0.03, 0.05]: the upper end is not below 0.05"
    assert margin_verdict((0.025, 0.025, 5), 0.05) == "inconclusive", "[0, 0.05]: neither end past its bound"
    assert margin_verdict((0.0, math.nan, 1), 0.05) == "inconclusive"
    assert margin_verdict((math.nan, math.nan, 0), 0.05) == NO_DATA


def test_a_claim_with_missing_comparisons_is_no_data_unless_an_available_one_fails():
    up, down, none = (0.1, 0.05, 5), (-0.1, 0.05, 5), (math.nan, math.nan, 0)
    assert claim([up, up]) == "supported"
    assert claim([up, none]) == NO_DATA
    assert claim([none]) == NO_DATA
    assert claim([down, none]) == "not supported"


def test_the_hypotheses_follow_their_rules_and_one_without_data_is_inconclusive(tmp_path):
    st = _study(tmp_path)  # no binac_lam0: H4 has no data
    runs = [_run(m, s, r) for r in ("moderate", "sparse") for m in st.methods for s in st.seeds]
    runs.append({**_run("binac", 3, "sparse"), "finished": False, "state": "crashed"})
    report = build_study_report(
        st, MEASURED, {"moderate": 3, "sparse": 2}, ["a listed deviation"], runs, tmp_path / "out"
    )
    text = report["text"]
    assert "applied mechanically" in text
    assert "**supported**" in _hypothesis(text, "H1")
    # at 3840 actor training samples fixed_critic has had 12 iterations (0.14), grpo all 60 (0.20)
    assert "**not supported**" in _hypothesis(text, "H2")
    assert "**supported**" in _hypothesis(text, "H3"), "binac's critic climbs past its start and the frozen critic"
    assert f"**{NO_DATA}**" in _hypothesis(text, "H4")
    assert "**supported**" in _hypothesis(text, "H5")
    # binac's approves_wrong drifts by 0, 1, 2 points: +1.0 ± 2.5, upper end 3.5 < 5 points
    assert "**supported**" in _hypothesis(text, "H6") and "+1.0 ± 2.5 (n=3)" in text
    assert "Beside it, not a hypothesis: the same at the equal-budget point on generated samples" in text
    assert "binac iteration 5 (4160)" in text and "fixed_critic iteration 7 (4032)" in text
    assert "Runs not finished: sparse/binac/s3 (crashed)" in text and "- a listed deviation" in text
    assert {p.rsplit("/", 1)[-1] for p in report["files"]} == {"report.md", "study-moderate.png", "study-sparse.png"}


def test_the_report_builds_with_no_finished_runs_and_every_hypothesis_without_data(tmp_path):
    st = _study(tmp_path)
    runs = [{**_run(m, s, "sparse"), "finished": False, "state": "crashed"} for m in st.methods for s in st.seeds]
    text = build_study_report(st, MEASURED, {"moderate": 3, "sparse": 2}, [], runs, tmp_path / "out")["text"]
    assert "**Partial: 0 of 15 runs finished.**" in text
    for tag in ("H1", "H2", "H3", "H4", "H5", "H6"):
        assert f"**{NO_DATA}**" in _hypothesis(text, tag), tag


# --------------------------------------------------------------------------- the pilot


def test_choose_variant_takes_the_highest_mean_and_breaks_a_tie_by_the_smaller_values():
    lr = {"a": {"train.actor_lr": 0.001}, "b": {"train.actor_lr": 0.002}, "c": {"train.actor_lr": 0.005}}
    assert choose_variant({"a": 0.30, "b": 0.35, "c": 0.20}, lr) == "b"
    assert choose_variant({"a": 0.300, "b": 0.3005, "c": 0.20}, lr) == "a", "within 0.1 point: the smaller rate"
    assert choose_variant({"a": 0.355, "b": 0.356, "c": 0.20}, lr) == "a", "exactly 0.1 point apart is a tie"
    assert choose_variant({"a": 0.300, "b": 0.3015, "c": None}, lr) == "b", "more than 0.1 point is no tie"
    grid = {"x": {"train.critic_lr": 0.01, "train.t_high": 1}, "y": {"train.critic_lr": 0.005, "train.t_high": 2}}
    assert choose_variant({"x": 0.3008, "y": 0.30}, grid) == "y", "the smaller learning rate before fewer passes"
    assert choose_variant({"x": None, "y": None}, grid) is None


def _pilot(tmp_path):
    critic = {f"c{lr}_t{t}": {"train.critic_lr": lr, "train.t_high": t} for lr in (0.002, 0.005, 0.01) for t in (1, 2)}
    return _study(
        tmp_path,
        name="pilot",
        iterations=20,
        methods=["grpo", "critic_only"],
        seeds=[100, 101, 102],
        regimes={"moderate": {"difficulty": 2}},
        variants={
            "grpo": {
                "lr1e-3": {"train.actor_lr": 0.001},
                "lr2e-3": {"train.actor_lr": 0.002},
                "lr5e-3": {"train.actor_lr": 0.005},
            },
            "critic_only": critic,
        },
        select={"grpo": "acc_single", "critic_only": "acc_feedback"},
    )


def test_the_pilot_table_chooses_each_methods_variant_by_the_rule_with_a_tie(tmp_path):
    st = _pilot(tmp_path)
    finals = {
        ("grpo", "lr1e-3"): [0.300, 0.301, 0.299],
        ("grpo", "lr2e-3"): [0.3006] * 3,  # a tie: 1e-3 wins
        ("grpo", "lr5e-3"): [0.25] * 3,
    }
    feedback = {
        "c0.002_t1": 0.20,
        "c0.002_t2": 0.21,
        "c0.005_t1": 0.22,
        "c0.005_t2": 0.30,
        "c0.01_t1": 0.3008,
        "c0.01_t2": 0.28,
    }  # a tie between (0.005, 2) and (0.01, 1): the smaller learning rate wins
    finals |= {("critic_only", v): [a] * 3 for v, a in feedback.items()}
    runs = []
    for (method, variant), values in finals.items():
        metric = "acc_single" if method == "grpo" else "acc_feedback"
        for seed, value in zip(st.seeds, values, strict=True):
            runs.append(
                _run(
                    method,
                    seed,
                    "moderate",
                    iterations=20,
                    total=1280,
                    variant=variant,
                    evals={metric: {0: 0.1, 10: 0.2, 20: value}, "acc_single": {0: 0.1, 10: 0.2, 20: value}},
                )
            )
    text = build_study_report(st, {2: MEASURED[2]}, {"moderate": 2}, [], runs, tmp_path / "out")["text"]
    pilot = text[text.index("## Pilot") :]
    assert '| lr1e-3 | `{"train.actor_lr": 0.001}` | 30.0 ± 0.2 | 20 | **chosen** |' in pilot
    assert '| lr2e-3 | `{"train.actor_lr": 0.002}` | 30.1 ± 0.0 | 20 | tie, not chosen |' in pilot
    assert '| c0.005_t2 | `{"train.critic_lr": 0.005, "train.t_high": 2}` | 30.0 ± 0.0 | 20 | **chosen** |' in pilot
    assert (
        'main-study overrides: {"train.actor_lr": 0.001, "train.critic_lr": 0.005, "train.t_high": 2}'
        in pilot.splitlines()
    )
    assert "Not tested in a pilot" in text
    assert "| grpo [lr5e-3] |" in text, "the accuracy tables show every variant"


def test_a_pilot_with_auc_paired_tables_areas_ties_the_choice_and_the_edge(tmp_path):
    """grpo, 20 iterations, evaluations at 0, 10, 20 (acc_single 0.1 at step 0 and at 20: lr1e-3 0.3, lr2e-3 0.3,
    lr5e-3 0.32; at 10 per seed: lr1e-3 0.20, 0.26, 0.14; lr2e-3 0.25; lr5e-3 0.30, 0.24, 0.36). Area =
    (0.1 + 2·mid + last) / 4: lr1e-3 20.0, 23.0, 17.0 %; lr2e-3 22.5 %; lr5e-3 25.5, 22.5, 28.5 %. The leader
    lr5e-3 − lr2e-3: +3.0, 0.0, +6.0 (mean 3.0, sd 3.0, t(0.975, 2)·3.0/√3 = 7.5: a tie); − lr1e-3: +5.5, −0.5,
    +11.5 (mean 5.5, sd 6.0, half-width 14.9: a tie); lr2e-3 changes nothing from micro's actor_lr 0.002:
    chosen. The leader holds the grid's highest learning rate: an edge."""
    grid = {
        "lr1e-3": {"train.actor_lr": 0.001},
        "lr2e-3": {"train.actor_lr": 0.002},
        "lr5e-3": {"train.actor_lr": 0.005},
    }
    st = _study(
        tmp_path,
        name="pilot",
        iterations=20,
        methods=["grpo"],
        seeds=[100, 101, 102],
        regimes={"moderate": {"difficulty": 2}},
        variants={"grpo": grid},
        select={"grpo": "acc_single"},
        select_rule="auc_paired",
    )
    at_10 = {"lr1e-3": [0.20, 0.26, 0.14], "lr2e-3": [0.25] * 3, "lr5e-3": [0.30, 0.24, 0.36]}
    at_20 = {"lr1e-3": 0.3, "lr2e-3": 0.3, "lr5e-3": 0.32}
    runs = [
        _run(
            "grpo",
            seed,
            "moderate",
            iterations=20,
            total=1280,
            variant=v,
            evals={"acc_single": {0: 0.1, 10: mid, 20: at_20[v]}},
        )
        for v, mids in at_10.items()
        for seed, mid in zip(st.seeds, mids, strict=True)
    ]
    text = build_study_report(st, {2: MEASURED[2]}, {"moderate": 2}, [], runs, tmp_path / "out")["text"]
    pilot = text[text.index("## Pilot") :]
    assert '| lr5e-3 | `{"train.actor_lr": 0.005}` | 1 | 25.5 ± 7.5 | 32.0 ± 0.0 | leader | leader |' in pilot
    assert (
        '| lr2e-3 | `{"train.actor_lr": 0.002}` | 0 | 22.5 ± 0.0 | 30.0 ± 0.0 | +3.0 ± 7.5 (n=3) | **chosen** (tie) |'
        in pilot
    )
    assert '| lr1e-3 | `{"train.actor_lr": 0.001}` | 1 | 20.0 ± 7.5 | 30.0 ± 0.0 | +5.5 ± 14.9 (n=3) | tie |' in pilot
    assert "**Edge**: the leader `lr5e-3` holds the highest `train.actor_lr` of the grid (0.005)" in pilot
    assert 'main-study overrides: {"train.actor_lr": 0.002}' in pilot.splitlines()


def test_select_names_a_method_with_variants_and_a_known_metric(tmp_path):
    with pytest.raises(BinacError, match="select names 'fixed_critic', which has no variants"):
        _study(tmp_path, variants={"grpo": {"a": {"train.actor_lr": 0.001}}}, select={"fixed_critic": "acc_single"})
    with pytest.raises(BinacError, match="unknown metric 'acc_best'"):
        _study(tmp_path, variants={"grpo": {"a": {"train.actor_lr": 0.001}}}, select={"grpo": "acc_best"})
    plain = _study(tmp_path, variants={"grpo": {"a": {"train.actor_lr": 0.001}}})
    chosen = _study(tmp_path, variants={"grpo": {"a": {"train.actor_lr": 0.001}}}, select={"grpo": "acc_single"})
    assert chosen.select == {"grpo": "acc_single"} and plain.select == {}
    assert plain.key() != chosen.key()
    assert _study(tmp_path, variants={"grpo": {"a": {"train.actor_lr": 0.001}}}, select={}).key() == plain.key()


def test_widen_adds_variants_that_run_but_leave_the_key_and_the_first_runs_as_they_were(tmp_path):
    from binac_core.studies.study import grid

    grid_ = {"grpo": {"lr1e-3": {"train.actor_lr": 0.001}, "lr1e-2": {"train.actor_lr": 0.01}}}
    first = _study(tmp_path, variants=grid_, select={"grpo": "acc_single"})
    wider = _study(
        tmp_path, variants=grid_, select={"grpo": "acc_single"}, widen={"grpo": {"lr2e-2": {"train.actor_lr": 0.02}}}
    )
    assert wider.key() == first.key(), "the first runs keep their keys"
    assert set(wider.variants["grpo"]) == {"lr1e-3", "lr1e-2", "lr2e-2"} and wider.widened == {("grpo", "lr2e-2")}
    runs = grid(wider, {"moderate": 2, "sparse": 2})
    assert {r.variant for r in runs if r.method == "grpo"} == {"lr1e-3", "lr1e-2", "lr2e-2"}
    assert grid(first, {"moderate": 2, "sparse": 2}) == [r for r in runs if r.variant != "lr2e-2"]
    with pytest.raises(BinacError, match="widen names 'fixed_critic', which has no variants"):
        _study(tmp_path, variants=grid_, widen={"fixed_critic": {"a": {"train.actor_lr": 0.02}}})
    with pytest.raises(BinacError, match="widen of 'grpo': variant 'lr1e-2' is already in variants"):
        _study(tmp_path, variants=grid_, widen={"grpo": {"lr1e-2": {"train.actor_lr": 0.02}}})


def test_select_rule_is_a_known_rule_and_counts_in_the_key_only_when_not_the_default(tmp_path):
    from binac_core.studies.study import SelectRule

    grid = {"grpo": {"a": {"train.actor_lr": 0.001}}}
    with pytest.raises(
        BinacError, match="select_rule: unknown value 'best' \\(known: last_mean, auc_paired, bank_margin_paired\\)"
    ):
        _study(tmp_path, variants=grid, select={"grpo": "acc_single"}, select_rule="best")
    plain = _study(tmp_path, variants=grid, select={"grpo": "acc_single"})
    auc = _study(tmp_path, variants=grid, select={"grpo": "acc_single"}, select_rule="auc_paired")
    assert plain.select_rule is SelectRule.LAST_MEAN and auc.select_rule is SelectRule.AUC_PAIRED
    assert _study(tmp_path, variants=grid, select={"grpo": "acc_single"}, select_rule="last_mean").key() == plain.key()
    assert auc.key() != plain.key()


def test_the_critic_health_table_gives_each_arm_at_step_0_and_its_last_evaluation_over_seeds(tmp_path):
    """binac's held-out verdict accuracy 0.5 at step 0 and 0.6 + 0.1·seed at the last evaluation (seeds 0, 1, 2:
    mean 0.7, t half-width t(0.975, 2)·0.1/√3 = 24.8 points; the seeds span 20 points, so they split and are
    given too); grpo logs no verdicts: no row."""
    st = _study(tmp_path)
    runs = []
    for s in st.seeds:
        for m in st.methods:
            evals = None
            if m == "binac":
                evals = {"critic/verdict_accuracy": {0: 0.5, 60: 0.6 + 0.1 * s}, "critic/approves_wrong": {0: 0.2}}
            runs.append(_run(m, s, "sparse", evals=evals))
    text = build_study_report(st, MEASURED, {"moderate": 3, "sparse": 2}, [], runs, tmp_path / "out")["text"]
    table = _section(text, "**Critic health on held-out attempts**", "\n\nCritic health (")
    assert "| binac, step 0 | 50.0 ± 0.0 | – | 20.0 ± 0.0 |" in table
    assert "| binac, last | 70.0 ± 24.8 (per seed: 60.0, 70.0, 80.0) | – | – |" in table, "seeds 20 points apart"
    assert "| grpo," not in table


# --------------------------------------------------------------------------- per-seed values, greedy, approval


def test_seeds_split_when_their_range_reaches_20_points():
    from binac_core.foundation.stats import per_seed, seeds_split

    assert seeds_split([0.1, 0.3]) and seeds_split([0.004, 0.021, 0.885, 0.89, 0.911])
    assert not seeds_split([0.1, 0.29]) and not seeds_split([0.9]) and not seeds_split([])
    assert per_seed([0.1, 0.29]) == ""
    assert per_seed([0.004, 0.885]) == " (per seed: 0.4, 88.5)"
    assert per_seed([-0.1, 0.15], scale=1.0, digits=3, sign=True) == " (per seed: -0.100, +0.150)"


def test_a_table_cell_whose_seeds_split_gives_the_values_seed_by_seed(tmp_path):
    """GRPO's final acc_single is 0.4, 88.5 and 91.1 % on seeds 0, 1, 2 (two modes): its cell gives them after the
    mean ± interval, in seed order; fixed_critic's seeds lie within a point: mean ± interval only."""
    st = _study(tmp_path)
    finals = {0: 0.004, 1: 0.885, 2: 0.911}
    runs = [
        _run(m, s, "sparse", evals={"acc_single": {0: 0.05, 60: finals[s]}} if m == "grpo" else None)
        for m in st.methods
        for s in (2, 0, 1)
    ]  # not in seed order: the cell puts them in it
    text = build_study_report(st, MEASURED, {"moderate": 3, "sparse": 2}, [], runs, tmp_path / "out")["text"]
    table = _section(text[text.index("## Regime `sparse`") :], "**At (a)")
    grpo = next(line for line in table.splitlines() if line.startswith("| grpo |"))
    assert "| 60.0 ± 128.3 (per seed: 0.4, 88.5, 91.1) |" in grpo  # t(0.975, 2)·51.6/√3
    fixed = next(line for line in table.splitlines() if line.startswith("| fixed_critic |"))
    assert "per seed" not in fixed
    assert "its per-seed values follow in seed order" in text


def test_the_greedy_protocol_is_a_column_beside_acc_single_and_named_in_the_protocol(tmp_path):
    st = _study(tmp_path)  # preset micro: the synthetic task, where the greedy protocol runs by default
    runs = [
        _run(m, s, "sparse", evals={"acc_single_greedy": {0: 1.0, 60: 1.0}} if m == "binac" else None)
        for m in st.methods
        for s in st.seeds
    ]
    text = build_study_report(st, MEASURED, {"moderate": 3, "sparse": 2}, [], runs, tmp_path / "out")["text"]
    assert "`acc_single_greedy` (actor alone, one greedy answer per problem: temperature 0)" in text
    table = _section(text[text.index("## Regime `sparse`") :], "**At (a)")
    assert "| acc_single | acc_single_greedy | acc_feedback | acc_gated_k2 |" in table
    binac = next(line for line in table.splitlines() if line.startswith("| binac |"))
    grpo = next(line for line in table.splitlines() if line.startswith("| grpo |"))
    assert binac.split(" | ")[5] == "100.0 ± 0.0" and grpo.split(" | ")[5] == "–"
    off = _study(tmp_path, overrides={**SIZES, "generation.eval_greedy": False})
    text = build_study_report(off, MEASURED, {"moderate": 3, "sparse": 2}, [], runs, tmp_path / "off")["text"]
    assert "acc_single_greedy" not in text


def test_approval_of_right_attempts_sits_beside_approval_of_wrong_ones(tmp_path):
    """The initial critic's table (the base measurements) and the held-out critic table (step 0 → last, and the
    frozen critic) both give `critic_approves_right` after `critic_approves_wrong`."""
    st = _study(tmp_path)
    measured = {**MEASURED, 2: {**MEASURED[2], "critic_approves_wrong": 0.223, "critic_approves_right": 0.25}}
    runs = [
        _run(
            m,
            s,
            "sparse",
            evals={"critic_approves_right": {0: 0.3, 60: 0.5}, "frozen_critic_approves_right": {60: 0.25}}
            if m == "binac"
            else None,
        )
        for m in st.methods
        for s in st.seeds
    ]
    text = build_study_report(st, measured, {"moderate": 3, "sparse": 2}, [], runs, tmp_path / "out")["text"]
    assert (
        "| regime | hits the first error | false alarm | approves wrong | approves right | agrees with the oracle |"
        in text
    )
    assert "| sparse (d2) | 30.0 % | 10.0 % | 22.3 % | 25.0 % | 25.0 % |" in text
    held_out = _section(text[text.index("## Regime `sparse`") :], "**The critic on held-out attempts**", "\n\n![")
    assert "| approves wrong | approves right | frozen critic: hits first error |" in held_out
    assert "frozen: approves wrong | frozen: approves right |" in held_out
    binac = next(line for line in held_out.splitlines() if line.startswith("| binac |"))
    cells = binac.split(" | ")
    assert cells[4] == "30.0 ± 0.0 → 50.0 ± 0.0" and cells[8].rstrip(" |") == "25.0 ± 0.0"


def test_the_protocol_says_when_the_critic_rewards_were_shuffled(tmp_path):
    runs = [_run(m, s, "sparse") for m in ("grpo", "binac") for s in (0, 1, 2)]
    plain = build_study_report(_study(tmp_path), MEASURED, {"moderate": 3, "sparse": 2}, [], runs, tmp_path / "a")
    control = _study(tmp_path, name="control", overrides={**SIZES, "train.critic_reward_shuffle": True})
    shuffled = build_study_report(control, MEASURED, {"moderate": 3, "sparse": 2}, [], runs, tmp_path / "b")
    assert "Negative control" not in plain["text"]
    assert "**Negative control**: each iteration's critic rewards are permuted" in shuffled["text"]


def test_the_gains_table_pairs_each_arms_last_evaluation_with_its_step_0(tmp_path):
    """binac's hits rise from 20 to 30 % on every seed (+10.0 ± 0.0), fixed_critic's stay (+0.0); acc_single's
    per-seed jitter cancels in the pairing."""
    st = _study(tmp_path)
    runs = [_run(m, s, "sparse") for m in st.methods for s in st.seeds]
    text = build_study_report(st, MEASURED, {"moderate": 3, "sparse": 2}, [], runs, tmp_path / "out")["text"]
    table = _section(text[text.index("## Regime `sparse`") :], "**Change over training", "\n\n!")
    header = next(line for line in table.splitlines() if line.startswith("| method |"))
    assert header == ("| method | acc_single | acc_feedback | critic_hits_first_error | critic_approves_wrong |")
    binac = next(line for line in table.splitlines() if line.startswith("| binac |")).split(" | ")
    assert binac[1] == "+30.0 ± 0.0" and binac[3] == "+10.0 ± 0.0"
    fixed = next(line for line in table.splitlines() if line.startswith("| fixed_critic |")).split(" | ")
    assert fixed[3] == "+0.0 ± 0.0"


def test_the_regimes_section_gives_the_preconditions_and_each_gates_verdict(tmp_path):
    from tests.studies.test_preconditions import _measures, passing_base

    st = _study(tmp_path, gates={"all": {"hint_gap_at_least": 0.2}, "sparse": {"greedy_single_at_most": 0.01}})
    measured = {**MEASURED, 2: {**MEASURED[2], "greedy_single": 0.02, "preconditions": _measures(passing_base())}}
    text = build_study_report(st, measured, {"moderate": 3, "sparse": 2}, [], [], tmp_path / "out")["text"]
    table = _section(text, "**The preconditions**", "\n\n## ")
    assert "| measure | sparse (d2) |" in table
    assert "| hint_gap | 1.000 [1.000, 1.000]; hint_gap_at_least 0.2: holds |" in table
    assert "| greedy_single | 0.020 [0.006, 0.070]; greedy_single_at_most 0.01: FAILS |" in table  # Wilson, 2 of 100
    assert "| 2 | 4.0 % | 2.0 % | 0.620 |" in text


ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
"""sha256 of b"abc"."""


def test_the_header_and_the_gate_table_name_the_base_by_its_weights(tmp_path):
    from tests.studies.test_preconditions import _measures, passing_base

    st = _study(tmp_path, gates={"all": {"hint_gap_at_least": 0.2}})
    measured = {**MEASURED, 2: {**MEASURED[2], "preconditions": _measures(passing_base())}}
    base = BaseIdentity("base-0123", ABC)
    runs = [{**_run("grpo", s, "sparse"), "base_weights": ABC} for s in st.seeds]
    text = build_study_report(st, measured, {"moderate": 3, "sparse": 2}, [], runs, tmp_path / "a", base)["text"]
    head = text[: text.index("## Protocol")]
    assert f"**Base model**: `base-0123`, weights sha256 `{ABC}`" in head
    assert "all 3 finished runs recorded the same weights" in head
    assert (
        f"**The preconditions** (G1-G4, binac_core/studies/preconditions.py: value [95 % interval]; a gate reads "
        f"the interval's conservative end) of the base with weights sha256 `{ABC}` (`base-0123`):" in text
    )
    runs[0] = {**runs[0], "base_weights": None}
    runs[1] = {**runs[1], "base_weights": "0" * 64}
    head = build_study_report(st, measured, {"moderate": 3, "sparse": 2}, [], runs, tmp_path / "b", base)["text"]
    assert f"**runs on other base weights**: sparse/grpo/s1 ({'0' * 64})" in head
    assert "1 of 3 finished runs record no base weights" in head
    unnamed = build_study_report(st, measured, {"moderate": 3, "sparse": 2}, [], runs, tmp_path / "c")["text"]
    assert "**Base model**" not in unnamed and "conservative end):" in unnamed


def test_a_control_study_tests_no_hypothesis_and_says_why(tmp_path):
    st = _study(tmp_path, methods=["critic_only"])
    runs = [_run("critic_only", s, "sparse") for s in st.seeds]
    text = build_study_report(st, MEASURED, {"moderate": 3, "sparse": 2}, [], runs, tmp_path / "out")["text"]
    assert "None tested: the pre-registered hypotheses compare binac, fixed_critic, grpo" in text
    assert "**H1**" not in text and "**Change over training" in text


def test_a_pilot_with_bank_margin_paired_chooses_by_the_critic_margin_over_the_runs_second_half(tmp_path):
    """binac, 20 iterations, evaluations at 0, 10, 20: the margin averages 10 and 20 (the second half). On the
    bank's val half the frozen critic hits 20 % with 50 % false alarm (J −30); every trained critic 50 % false
    alarm, hits (same at 10 and 20) reference 30 %, kl_0.03 40 / 35 / 45 %, kl_0.1 42 %, and at step 0 (outside
    the window) 90 %. Margins: reference +10, kl_0.03 +20, +15, +25 (mean 20), kl_0.1 +22 (leader). Leader −
    kl_0.03: +2, +7, −3 (sd 5, half-width t(0.975, 2)·5/√3 = 12.4: a tie); − reference: +12 each (no tie). Both
    change one field: the higher mean, kl_0.1, is chosen, the grid's highest KL: an edge."""
    grid = {
        "reference": {},
        "kl_0.03": {"train.critic_kl_coef": 0.03},
        "kl_0.1": {"train.critic_kl_coef": 0.1},
    }
    st = _study(
        tmp_path,
        name="pilot-margin",
        iterations=20,
        methods=["binac"],
        seeds=[100, 101, 102],
        regimes={"sparse": {"difficulty": 2}},
        overrides={**SIZES, "bank.enabled": True, "task.eval_split": "val"},
        variants={"binac": grid},
        select={"binac": "critic_margin"},
        select_rule="bank_margin_paired",
    )
    hits = {"reference": [0.30] * 3, "kl_0.03": [0.40, 0.35, 0.45], "kl_0.1": [0.42] * 3}
    runs = []
    for v, per_seed in hits.items():
        for seed, h in zip(st.seeds, per_seed, strict=True):
            r = _run("binac", seed, "sparse", iterations=20, total=1280, variant=v, evals={"acc_single": {0: 0.1}})
            for critic, hit in (("critic", {0: 0.9, 10: h, 20: h}), ("frozen_critic", dict.fromkeys((0, 10, 20), 0.2))):
                r["metrics"][f"bank_val/{critic}_hits_first_error"] = hit
                r["metrics"][f"bank_val/{critic}_false_alarm"] = dict.fromkeys((0, 10, 20), 0.5)
                r["metrics"][f"bank_eval/{critic}_hits_first_error"] = dict.fromkeys((0, 10, 20), 0.0)  # never read
            runs.append(r)
    text = build_study_report(st, {2: MEASURED[2]}, {"sparse": 2}, [], runs, tmp_path / "out")["text"]
    pilot = text[text.index("## Pilot") :]
    assert "the frozen base critic's on the bank's `val` half, averaged over the evaluations at 10, 20" in pilot
    assert '| kl_0.1 | `{"train.critic_kl_coef": 0.1}` | 1 | +22.0 ± 0.0 | +22.0 ± 0.0 | +0.0 ± 0.0 | – |' in pilot
    assert "| +2.0 ± 12.4 (n=3) | tie |" in pilot and "| +12.0 ± 0.0 (n=3) |  |" in pilot
    assert "| kl_0.1 |" in pilot and "| leader | **chosen** (leader) |" in pilot
    assert "**Edge**: the leader `kl_0.1` holds the highest `train.critic_kl_coef` of the grid (0.1)" in pilot
    assert 'main-study overrides: {"train.critic_kl_coef": 0.1}' in pilot.splitlines()


def test_the_critic_margin_goes_with_its_rule_and_the_bank(tmp_path):
    grid = {"binac": {"a": {"train.critic_kl_coef": 0.1}}}
    bank = {**SIZES, "bank.enabled": True}
    with pytest.raises(BinacError, match="select critic_margin needs select_rule: bank_margin_paired"):
        _study(tmp_path, overrides=bank, variants=grid, select={"binac": "critic_margin"})
    with pytest.raises(BinacError, match="select_rule bank_margin_paired reads critic_margin only"):
        _study(
            tmp_path, overrides=bank, variants=grid, select={"binac": "acc_single"}, select_rule="bank_margin_paired"
        )
    with pytest.raises(BinacError, match=r"needs the attempt bank \(bank.enabled: true\)"):
        _study(tmp_path, variants=grid, select={"binac": "critic_margin"}, select_rule="bank_margin_paired")
