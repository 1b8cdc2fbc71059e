"""The remedies for a critic that unlearns, each on hand-computed cases: the critic's own reward
scaling, the skip of critic groups whose feedbacks say the same thing, the alternating schedule (its phases, its
exact running totals, the budget and evaluation points it gives, and what an iteration trains under it), and the
problem stream's staircase; every one off by default, and invalid settings refused in one line before any
compute."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.model.stage_io import AdapterRef, Feedback
from binac_core.rl import schedule, stream
from binac_core.rl.batches import critic_samples, feedback_samples, saying
from binac_core.rl.kinds import Phase
from binac_core.rl.loop import StepContext, run_iteration
from binac_core.rl.methods import method_spec
from binac_core.runs.plans import evaluation_steps
from binac_core.store.identity import RunIdentity
from binac_core.store.records import sample_counts


def _fb(pid: str, k: int, j: int, text: str = "") -> Feedback:
    return Feedback(pid, k, j, text, [1], [2], [0.0])


def _cfg(**train):
    return load_config("micro", {f"train.{k}": v for k, v in train.items()})


# --- every remedy is off by default ---


def test_every_remedy_is_off_by_default():
    t = load_config("micro").train
    assert (t.critic_scale_rewards, t.critic_skip_same_saying, t.alternation, t.stream_target) == (
        None,
        False,
        None,
        None,
    )
    assert t.critic_kl_coef == 0.0  # the anchored critic: an existing field, off


# --- the critic's own reward scaling ---


def test_the_critic_scales_its_rewards_by_its_own_setting():
    # one group of three feedbacks, rewards 1, 0, 0: mean 1/3, centred (2/3, -1/3, -1/3), unbiased std 1/sqrt(3)
    fbs = [_fb("a", 0, j) for j in range(3)]
    rewards = [1.0, 0.0, 0.0]
    centred = [2 / 3, -1 / 3, -1 / 3]
    std = math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
    shared = critic_samples(_cfg(), fbs, rewards)  # None: the actor's scale_rewards (True in micro)
    assert [s.advantage for s in shared] == pytest.approx([c / (std + 1e-6) for c in centred])
    own = critic_samples(_cfg(critic_scale_rewards=False), fbs, rewards)
    assert [s.advantage for s in own] == pytest.approx(centred)
    scaled = critic_samples(_cfg(scale_rewards=False, critic_scale_rewards=True), fbs, rewards)
    assert [s.advantage for s in scaled] == pytest.approx([c / (std + 1e-6) for c in centred])


# --- skipping groups whose feedbacks say the same thing ---


def test_groups_whose_feedbacks_say_the_same_thing_leave_the_batch_and_the_others_keep_their_advantages():
    # attempt (a, 0): both say "step 2"; attempt (a, 1): step 2 and step 3; rewards differ in both
    fbs = [_fb("a", 0, 0), _fb("a", 0, 1), _fb("a", 1, 0), _fb("a", 1, 1)]
    said = [("incorrect", 2), ("incorrect", 2), ("incorrect", 2), ("incorrect", 3)]
    kept = feedback_samples(fbs, [1.0, 0.0, 1.0, 0.0], scale=False, said=said)
    assert [s.advantage for s in kept] == [0.5, -0.5]  # the second group's, as without the skip
    assert len(feedback_samples(fbs, [1.0, 0.0, 1.0, 0.0], scale=False)) == 4


def test_what_a_feedback_says_is_its_verdict_and_step_on_the_synthetic_task_and_its_text_elsewhere():
    checked, plain = "07+5=12 ok 12-9=13 no. Step 2 is wrong.", "Step 2 is wrong."
    assert saying(_fb("a", 0, 0, checked), "synthetic") == saying(_fb("a", 0, 1, plain), "synthetic")
    assert saying(_fb("a", 0, 0, "Step 3 is wrong."), "synthetic") != saying(_fb("a", 0, 1, plain), "synthetic")
    assert saying(_fb("a", 0, 0, "Looks correct."), "synthetic") == ("correct", None)
    assert saying(_fb("a", 0, 0, " same \n"), "gsm8k") == saying(_fb("a", 0, 1, "same"), "gsm8k")
    assert saying(_fb("a", 0, 0, "one"), "gsm8k") != saying(_fb("a", 0, 1, "two"), "gsm8k")


def test_the_skip_reads_the_config_and_an_all_skipped_batch_is_empty():
    fbs = [_fb("a", 0, 0, "Step 2 is wrong."), _fb("a", 0, 1, "1+1=2 ok. Step 2 is wrong.")]
    assert len(critic_samples(_cfg(), fbs, [1.0, 0.0])) == 2
    assert critic_samples(_cfg(critic_skip_same_saying=True), fbs, [1.0, 0.0]) == []


# --- the alternating schedule ---


def test_the_phases_and_running_totals_of_an_alternation_of_two_actor_and_one_critic_iteration():
    alt = (2, 1)
    assert [schedule.phase_at(alt, s) for s in range(1, 7)] == [Phase.ACTOR, Phase.ACTOR, Phase.CRITIC] * 2
    assert [schedule.actor_iterations_through(alt, s) for s in range(0, 8)] == [0, 1, 2, 2, 3, 4, 4, 5]
    assert [schedule.step_of_actor_iteration(alt, n) for n in range(1, 6)] == [1, 2, 4, 5, 7]
    assert [schedule.last_step_within(alt, n) for n in range(0, 5)] == [0, 1, 3, 4, 6]
    assert schedule.phase_at(None, 5) == Phase.BOTH and schedule.actor_iterations_through(None, 5) == 5
    # one actor iteration, three critic ones: 1 A, 2-4 C, 5 A
    assert [schedule.phase_at((1, 3), s) for s in range(1, 6)] == [Phase.ACTOR] + [Phase.CRITIC] * 3 + [Phase.ACTOR]


def test_what_each_method_trains_under_alternation():
    cfg = _cfg(alternation=[2, 1])
    binac, lam0, grpo = method_spec("binac"), method_spec("binac_lam0"), method_spec("grpo")
    assert [binac.trains_critic_at(cfg, s) for s in (1, 2, 3, 6)] == [False, False, True, True]
    assert [binac.keeps_actor_update_at(cfg, s) for s in (1, 2, 3)] == [True, True, False]
    assert binac.updates_actor_at(cfg, 3) and not lam0.updates_actor_at(cfg, 3)  # θ⁺ only for a look-ahead
    assert grpo.alternation(cfg) is None and method_spec("critic_only").alternation(cfg) is None
    assert method_spec("critic_only").trains_critic_at(cfg, 1)
    # with critic_every 2 too: a critic iteration whose number is even
    both = _cfg(alternation=[1, 2], critic_every=2)
    assert [binac.trains_critic_at(both, s) for s in range(1, 7)] == [False, True, False, False, False, True]


def test_the_budget_and_the_counts_under_alternation_are_exact():
    cfg = _cfg(alternation=[2, 1])
    binac = method_spec("binac")
    per = binac.actor_train_samples_per_iteration(cfg)  # B·G·(1 + K) = 4·4·3 = 48
    assert per == 48
    assert [binac.actor_samples_through(cfg, s) for s in range(0, 5)] == [0, 48, 96, 96, 144]
    # a budget of 2 iterations runs 1, 2 and the critic iteration 3; of 3, up to 4 (5 would be the 4th)
    assert binac.iterations_for_budget(cfg, 2 * per) == 3
    assert binac.iterations_for_budget(cfg, 3 * per + 47) == 4
    assert binac.iterations_for_budget(_cfg(), 3 * per) == 3  # no alternation: budget // per
    run = RunIdentity(
        run_id="r",
        method="binac",
        preset="micro",
        seed=0,
        benchmark="synthetic",
        actor_samples_per_iteration=per,
        generated_samples_per_iteration=10,
        alternation=(2, 1),
    )
    assert [sample_counts(run, s) for s in (3, 4)] == [
        {"actor_samples": 96, "generated_samples": 30},
        {"actor_samples": 144, "generated_samples": 40},
    ]


def test_evaluation_points_under_alternation_are_where_the_actor_count_is_reached():
    # at_samples 3·48: reached at the 3rd actor iteration, iteration 4; shared counts 2·48 and 4·48: iterations 2, 5
    assert evaluation_steps(9, 100, None, 48, 3 * 48, alternation=(2, 1)) == {4, 9}
    assert evaluation_steps(9, 100, 4, 48, shared_samples=[96, 192], alternation=(2, 1)) == {2, 5, 9}
    assert evaluation_steps(9, 100, 4, 48, shared_samples=[96, 192]) == {2, 4, 9}


@dataclass
class _Recorder:
    """Stages that record what an iteration asks of them (`Stages`), adapters named by their update."""

    calls: list = field(default_factory=list)

    def rollouts(self, at, actor):
        self.calls.append(("rollouts", actor.digest))
        return "batch", "attempts"

    def score(self, at, batch, answers, name):
        return name

    def feedback(self, at, batch, attempts, first, source, critic):
        self.calls.append(("feedback", critic.digest))
        return "feedback"

    def refine(self, at, batch, attempts, feedback, actor, name):
        self.calls.append((name, actor.digest))
        return name

    def update_actor(self, at, actor, *rest):
        from binac_core.rl.update import AdapterUpdate

        return AdapterUpdate(AdapterRef("actor", "", actor.digest + "+"), 0.5, 0.0, 0.0, 1.0)

    def critic_reward(self, at, spec, *rest):
        return "critic_rewards"

    def update_critic(self, at, critic, feedback, rewards):
        from binac_core.rl.update import AdapterUpdate

        self.calls.append(("update_critic", critic.digest))
        return AdapterUpdate(AdapterRef("critic", "", critic.digest + "+"), 0.25, 0.0, 0.0, 1.0)


def _iterate(cfg, method, step):
    stages = _Recorder()
    res = run_iteration(
        stages,
        cfg,
        method_spec(method),
        StepContext(0, step),
        AdapterRef("actor", "", "θ"),
        AdapterRef("critic", "", "φ"),
    )
    return res, stages.calls


def test_a_critic_iteration_computes_the_look_ahead_from_the_frozen_actor_and_keeps_the_actor():
    cfg = _cfg(alternation=[2, 1])
    res, calls = _iterate(cfg, "binac", 3)
    assert ("lookahead", "θ+") in calls and ("refined", "θ") in calls and ("update_critic", "φ") in calls
    assert res.actor.digest == "θ" and res.actor_update is None and res.discarded_actor_update.adapter.digest == "θ+"
    assert res.critic.digest == "φ+"
    res, calls = _iterate(cfg, "binac", 1)  # an actor iteration: θ⁺ kept, the critic frozen
    assert res.actor.digest == "θ+" and res.critic.digest == "φ" and res.critic_update is None
    assert ("update_critic", "φ") not in calls and res.discarded_actor_update is None
    res, calls = _iterate(cfg, "binac_lam0", 3)  # no look-ahead: no actor update at all
    assert res.actor.digest == "θ" and res.discarded_actor_update is None and res.actor_update is None
    res, _ = _iterate(_cfg(), "binac", 3)  # no alternation: both trained
    assert (res.actor.digest, res.critic.digest) == ("θ+", "φ+")


# --- the problem stream ---


def _stream_cfg(**train):
    overrides = {
        "task.pretrain_difficulties": [2, 3, 4, 5, 6],
        "task.difficulty": 4,
        "train.stream_target": 0.5,
        "train.stream_difficulties": [3, 5],
        "train.stream_window": 2,
        "train.stream_band": 0.1,
    }
    return load_config("micro", overrides | {f"train.{k}": v for k, v in train.items()})


def test_the_stream_climbs_when_the_actor_is_above_target_and_descends_when_below():
    cfg, binac = _stream_cfg(), method_spec("binac")
    assert stream.difficulty_at(cfg, binac, []) == 4
    assert stream.difficulty_at(cfg, binac, [(4, 0.9)]) == 4  # one iteration: the window is not full
    assert stream.difficulty_at(cfg, binac, [(4, 0.9), (4, 0.8)]) == 5  # mean 0.85 > 0.6
    assert stream.difficulty_at(cfg, binac, [(4, 0.9), (4, 0.8), (5, 0.9), (5, 0.9)]) == 5  # at the top
    assert stream.difficulty_at(cfg, binac, [(4, 0.2), (4, 0.3)]) == 3  # mean 0.25 < 0.4
    # within the band: the window slides; (0.5, 0.7) mean 0.6 stays, then (0.7, 0.9) mean 0.8 climbs
    assert stream.difficulty_at(cfg, binac, [(4, 0.5), (4, 0.7)]) == 4
    assert stream.difficulty_at(cfg, binac, [(4, 0.5), (4, 0.7), (4, 0.9)]) == 5
    assert stream.difficulty_at(cfg, method_spec("critic_only"), [(4, 0.9), (4, 0.9)]) == 4  # a frozen actor
    assert stream.difficulty_at(_cfg(), binac, [(4, 0.9)]) is None  # off
    with pytest.raises(ValueError, match="drew difficulty 5"):
        stream.difficulty_at(cfg, binac, [(5, 0.9)])


def test_the_stream_starts_at_the_task_difficulty_clamped_into_its_range():
    assert stream.start_difficulty(_stream_cfg(stream_difficulties=[5, 6])) == 5


# --- invalid settings: one line before any compute ---


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"train.alternation": [0, 2]}, "train.alternation.0: Input should be greater than or equal to 1"),
        ({"train.alternation": [3, 0]}, "train.alternation.1: Input should be greater than or equal to 1"),
        ({"train.stream_target": 0.5}, "set together or not at all"),
        (
            {"train.stream_target": 0.5, "train.stream_difficulties": [2, 3]},
            "within the base's pretraining difficulties (task.pretrain_difficulties: 2)",
        ),
        (
            {"task.pretrain_difficulties": [2, 3, 5], "train.stream_target": 0.5, "train.stream_difficulties": [2, 5]},
            "train.stream_difficulties 2,5 must be a range",
        ),
        ({"train.stream_target": 1.5, "train.stream_difficulties": [2, 2]}, "train.stream_target"),
    ],
)
def test_invalid_remedy_settings_are_refused_in_one_line(overrides, message):
    with pytest.raises(BinacError, match=message.replace("(", r"\(").replace(")", r"\)")) as exc:
        load_config("micro", overrides)
    assert "\n" not in str(exc.value)


def test_the_flows_running_totals_and_the_reports_axis_under_alternation():
    from binac_core.reports.report import actor_samples_at, curves
    from flows.bookkeeping import IterationLog

    log = IterationLog("binac", 4, 48, 10, (2, 1))
    counts = [(log.metrics({}, [])["train/actor_samples"], log.generated) for _ in range(4)]
    assert counts == [(48, 10), (96, 20), (96, 30), (144, 40)]
    run = {"samples_per_iteration": 48, "alternation": [2, 1], "evals": {"0": {"a": 0.1}, "3": {"a": 0.2}}}
    assert actor_samples_at(run, 3) == 96 and curves(run, "a") == [(0, 0.1), (96, 0.2)]
    assert actor_samples_at({"samples_per_iteration": 48}, 3) == 144


class _AnswerBackend:
    """Answers every prompt `A: 0`; keeps every prompt it was sent."""

    def __init__(self):
        self.sent: list[str] = []

    def generate(self, prompts, adapter, params):
        from binac_core.model.generation import Generation

        self.sent += [m[-1]["content"] for m in prompts]
        return [Generation("A: 0", [1], [2], [0.0]) for _ in prompts]


def test_the_stream_draws_the_iterations_problems_from_the_chosen_difficultys_split():
    from binac_core.benchmarks.synthetic import make_row
    from binac_core.rl.loop import LibraryStages

    cfg = _stream_cfg()
    rows = [make_row("1+1")]  # the run's own split (difficulty 1): never drawn once the stream is on
    rows_at = {d: [make_row("2" + "+1" * d)] for d in (3, 4, 5)}
    stages = LibraryStages(None, _AnswerBackend(), cfg, rows, rows_at)
    for d in (3, 4, 5):
        problems, _ = stages.rollouts(StepContext(0, 1, None, d), AdapterRef("actor", "", "θ"))
        assert [p["difficulty"] for p in problems] == [d]
    problems, _ = stages.rollouts(StepContext(0, 1), AdapterRef("actor", "", "θ"))
    assert problems == rows
