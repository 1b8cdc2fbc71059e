"""The critic's verdict: the one parser on hand-written critic outputs of every benchmark, the prompts
with the option on and off (off: today's prompts, character for character), the critic health measures on
hand-computed rows (and the instrument checks: the verifier as a critic scores perfectly, verdicts drawn
independently of the attempt score chance), their agreement with the synthetic task's first-error measures, and
the critic's verdict bonus worked out by hand."""

import random

import pytest

from binac_core import benchmarks
from binac_core.benchmarks.verdict import parse_verdict
from binac_core.rl.kinds import CriticRewardForm
from binac_core.rl.methods import FeedbackSource

MATH_LIKE = ("math", "math500", "gsm8k", "mbpp", "gpqa_diamond")


@pytest.mark.parametrize("name", MATH_LIKE)
@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("You dropped the carry in step 2. Redo the addition.\nVerdict: incorrect", "incorrect"),  # last, as asked
        ("Verdict: correct\nEvery step follows from the previous one.", "correct"),  # first: read as well
        ("Check the units of the final answer.", "none"),  # missing
        ("Verdict: correct\nOn second thought, step 3 is wrong.\nVerdict: incorrect", "none"),  # contradictory
        ("VERDICT: INCORRECT", "incorrect"),  # another case
        ("verdict: Correct.", "correct"),
        ("**Verdict:** Incorrect", "incorrect"),  # markdown emphasis around the word and the value
        ("Verdict: **correct**", "correct"),
        ("Verdict: partly correct", "none"),  # not one of the two values: never guessed
        ("The answer is incorrect. Try again.", "none"),  # the word without the verdict line
        ("The student's answer is correct.", "none"),
        ("Looks correct.", "none"),  # the synthetic task's phrase is not a benchmark verdict
        ("Hints:\n- Recheck step 2\nVerdict:", "none"),  # truncated by the token limit
    ],
)
def test_the_parser_reads_a_benchmark_verdict_line_and_never_guesses(name, text, want):
    assert parse_verdict(text, benchmarks.get(name).verdict_syntax) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("Looks correct.", "correct"),
        ("Step 2 is wrong.", "incorrect"),
        ("Check your work.", "incorrect"),  # the oracle's words for right steps under a wrong answer
        ("Step 2 is wrong. Looks correct.", "none"),  # contradictory
        ("hmm 7+5", "none"),
        ("Verdict: correct", "none"),  # the benchmarks' line is not a synthetic verdict
    ],
)
def test_the_parser_reads_the_synthetic_feedback_as_its_verdict(text, want):
    assert parse_verdict(text, benchmarks.get("synthetic").verdict_syntax) == want


ROW = {"id": "p1", "question": "What is 2+3?", "answer": "5", "tests": "assert f(1)==2"}
ATTEMPTS = {
    "math": ("I think 6.", None),
    "gsm8k": ("I think 6.", None),
    "mbpp": ("```python\ndef f(x):\n    return x\n```", "AssertionError: f(1)==2"),
    "gpqa_diamond": ("Answer: B", None),
}
BEFORE = {  # the critic prompts of every run before `critic.verdict` existed, as they were rendered then
    "math": "You are an expert math tutor. Review the problem and a student's attempt. Point out the critical errors: "
    "conceptual mistakes, wrong steps or calculation slips. Give a short list of hints, as direct instructions "
    "('Do X', 'Avoid Y'). Do NOT solve the problem and do NOT state the final answer.\n\nProblem:\nWhat is "
    "2+3?\n\nStudent attempt:\nI think 6.\n\nHints:",
    "mbpp": "You are an expert programming mentor. Analyze the solution below for bugs, wrong logic or unhandled edge "
    "cases, using the execution result. Write a brief, helpful instruction for fixing it. Do NOT solve the "
    "task yourself and do NOT write any code: reply with ONLY the instruction.\n\nTask:\nWhat is 2+3?\n\n"
    "Solution:\n```python\ndef f(x):\n    return x\n```\n\nExecution result:\nAssertionError: f(1)==2\n\n"
    "Instruction:",
    "gpqa_diamond": "You are an expert science reviewer. Review the question and a student's answer. Point out "
    "factual errors, flawed reasoning or misread options in a few short sentences. Do NOT say which "
    "option is correct.\n\nQuestion:\nWhat is 2+3?\n\nStudent answer:\nAnswer: B\n\nReview:",
}
BEFORE["gsm8k"] = BEFORE["math"]


@pytest.mark.parametrize("name", sorted(ATTEMPTS))
def test_the_option_off_gives_the_old_prompts_and_on_asks_for_the_verdict_line(name):
    bench = benchmarks.get(name)
    attempt, shown = ATTEMPTS[name]
    off = bench.critic_messages(ROW, attempt, shown, False)
    assert off == [{"role": "user", "content": BEFORE[name]}]
    (on,) = bench.critic_messages(ROW, attempt, shown, True)
    assert "'Verdict: correct'" in on["content"] and "'Verdict: incorrect'" in on["content"]
    assert on["content"].replace(on["content"].split("\n\n")[0], "") == BEFORE[name].replace(
        BEFORE[name].split("\n\n")[0], ""
    ), "only the instruction paragraph changes"
    # what the request names is the prompt's own word for the attempt
    assert parse_verdict("Verdict: incorrect", bench.verdict_syntax) == "incorrect"


def test_the_option_on_default_and_the_synthetic_prompt_unchanged_by_it():
    from binac_core.benchmarks import synthetic
    from binac_core.foundation.config import load_config

    assert load_config("smol-gsm8k").critic.verdict and load_config("micro").critic.verdict
    row = {"id": "q", "question": "7+5-3", "answer": "9", "style": "instruct"}
    assert synthetic.critic_messages(row, "7+5=2 2-3=9 A: 9", None, True) == synthetic.critic_messages(
        row, "7+5=2 2-3=9 A: 9", None, False
    )


def test_the_option_reaches_the_critic_prompt_through_sample_feedback():
    from binac_core.model.generation import SamplingParams
    from binac_core.model.stage_io import Attempt
    from binac_core.rl.episodes import sample_feedback

    class Echo:  # a backend that answers each prompt with its last line
        def generate(self, prompts, adapter, params):
            from binac_core.model.generation import Generation

            return [Generation(p[-1]["content"], [1], [2], [0.0]) for p in prompts]

    a = Attempt(
        problem_id="p1", sample_idx=0, prompt_text="", prompt_ids=[], text="I think 6.", token_ids=[], logprobs=[]
    )
    params = SamplingParams(8, 1.0, 1.0, seed=0)
    on = sample_feedback(Echo(), "math", {"p1": ROW}, [a], FeedbackSource.CRITIC_BASE, None, 1, params, verdict=True)
    off = sample_feedback(Echo(), "math", {"p1": ROW}, [a], FeedbackSource.CRITIC_BASE, None, 1, params, verdict=False)
    assert "Verdict: correct" in on[0].text and "Verdict" not in off[0].text


# --------------------------------------------------------------------------- the measures, by hand


def _r(verdict, r0, r1):
    return {"feedback_verdict": verdict, "attempt_reward": r0, "refined_reward": r1}


HAND = [
    _r("incorrect", 0.0, 1.0),  # a wrong attempt flagged, then fixed
    _r("incorrect", 0.0, 0.0),  # flagged, not fixed
    _r("correct", 0.0, 0.0),  # a wrong attempt approved (flattery)
    _r("none", 0.0, 0.0),  # no verdict on a wrong attempt
    _r("correct", 1.0, 1.0),  # a right attempt approved, copied
    _r("incorrect", 1.0, 1.0),  # a right attempt flagged (still right after)
    _r(None, 1.0, 0.0),  # a fixed instruction: no verdict, left out of every measure
]


def test_the_critic_health_measures_on_hand_computed_rows():
    from binac_core.reports.measures import critic_verdict_measures

    got = critic_verdict_measures(HAND)
    # 6 rows with a verdict; the verifier's verdicts: 4 incorrect (r0 = 0), 2 correct (r0 = 1)
    assert got["verdict_accuracy"] == pytest.approx(3 / 6)  # 2 wrong ones flagged + 1 right one approved
    assert got["approves_wrong"] == pytest.approx(1 / 4)
    assert got["flags_right"] == pytest.approx(1 / 2)
    assert got["verdict_missing"] == pytest.approx(1 / 6)
    assert got["balanced_accuracy"] == pytest.approx((2 / 4 + 1 / 2) / 2)
    assert got["gain_when_flagged"] == pytest.approx((1 + 0 + 0) / 3)  # r1 − r0 of the three flagged rows
    assert got["gain_when_approved"] == pytest.approx((0 + 0) / 2)


def test_the_measures_leave_empty_denominators_empty():
    from binac_core.reports.measures import critic_verdict_measures

    only_wrong = critic_verdict_measures([_r("incorrect", 0.0, 0.0)])
    assert only_wrong["flags_right"] is None and only_wrong["balanced_accuracy"] is None
    assert only_wrong["gain_when_approved"] is None and only_wrong["verdict_accuracy"] == 1.0
    assert all(v is None for v in critic_verdict_measures([_r(None, 0.0, 1.0)]).values())


def test_the_instrument_the_verifier_as_critic_is_perfect_and_independent_verdicts_are_chance():
    from binac_core.reports.measures import critic_verdict_measures

    rnd = random.Random(0)
    r0 = [float(rnd.random() < 0.3) for _ in range(20000)]
    oracle = critic_verdict_measures([_r("correct" if r else "incorrect", r, r) for r in r0])
    assert oracle["verdict_accuracy"] == 1.0 and oracle["balanced_accuracy"] == 1.0
    assert oracle["approves_wrong"] == 0.0 and oracle["flags_right"] == 0.0 and oracle["verdict_missing"] == 0.0
    flatterer = critic_verdict_measures([_r("correct", r, r) for r in r0])
    assert flatterer["balanced_accuracy"] == 0.5 and flatterer["approves_wrong"] == 1.0
    noise = critic_verdict_measures([_r(rnd.choice(["correct", "incorrect"]), r, r) for r in r0])
    assert abs(noise["balanced_accuracy"] - 0.5) < 0.02, "a verdict independent of the attempt carries no signal"


def test_the_one_run_cells_give_wilson_intervals_with_their_counts():
    from binac_core.foundation.stats import wilson_interval
    from binac_core.reports.critic_health import health_of_rows

    cells = health_of_rows(HAND)
    lo, hi = wilson_interval(3, 6)
    assert cells["verdict_accuracy"] == f"50.0 [{100 * lo:.1f}, {100 * hi:.1f}] (3/6)"
    assert cells["approves_wrong"].endswith("(1/4)") and cells["flags_right"].endswith("(1/2)")
    assert cells["gain_when_flagged"] == "+33.3 (n=3)" and cells["gain_when_approved"] == "+0.0 (n=2)"
    assert cells["balanced_accuracy"].startswith("50.0 [")


def test_the_synthetic_verdict_measures_agree_with_the_first_error_measures_on_the_same_rows():
    """On synthetic rows written by the pipeline's own row builder, where an attempt is wrong exactly when a
    written step is (one error at most, so none cancels) and the critic either names a step or approves:
    approves_wrong is critic_approves_wrong and flags_right is critic_false_alarm."""
    from binac_core.benchmarks import synthetic
    from binac_core.foundation.config import load_config
    from binac_core.model.stage_io import Attempt, Feedback, Refinement, ScoredBatch
    from binac_core.reports.measures import critic_error_measures, critic_verdict_measures
    from binac_core.store.identity import RunIdentity
    from binac_core.store.records import trajectory_rows

    rows = synthetic.make_split(load_config("micro").task, "eval")[:40]
    rnd = random.Random(3)
    attempts, feedback, refined, r0 = [], [], [], []
    for i, row in enumerate(rows):
        steps = synthetic.solve_steps(row["question"])
        if i % 2 == 0:  # one wrong result in step 1, later steps right from it: the answer is wrong too
            steps = _from_wrong_first(steps)
        text = synthetic.render_trace(steps)
        answer = synthetic.final_answer(text)
        a = Attempt(
            problem_id=row["id"], sample_idx=0, prompt_text="", prompt_ids=[], text=text, token_ids=[1], logprobs=[0.0]
        )
        attempts.append(a)
        r0.append(float(answer == row["answer"]))
        fb = rnd.choice([synthetic.LOOKS_CORRECT, synthetic.name_step(1), synthetic.name_step(2)])
        feedback.append(
            Feedback(
                problem_id=row["id"],
                sample_idx=0,
                feedback_idx=0,
                text=fb,
                prompt_ids=[],
                token_ids=[1],
                logprobs=[0.0],
            )
        )
        refined.append(
            Refinement(
                problem_id=row["id"],
                sample_idx=0,
                feedback_idx=0,
                prompt_ids=[],
                text=text,
                token_ids=[1],
                logprobs=[0.0],
            )
        )
    assert 0 < sum(r0) < len(r0)
    meta = RunIdentity(run_id="r", method="binac", preset="micro", seed=0, benchmark="synthetic")
    stored = trajectory_rows(
        meta,
        1,
        ScoredBatch(attempts, r0, feedback, refined, r0),
        split="eval",
        protocol="feedback",
        questions={r["id"]: r["question"] for r in rows},
    )
    assert all((r["first_wrong_step"] is None) == (r["attempt_reward"] > 0) for r in stored), "the premise"
    health, first_error = critic_verdict_measures(stored), critic_error_measures(stored)
    assert health["approves_wrong"] == first_error["critic_approves_wrong"]
    assert health["flags_right"] == first_error["critic_false_alarm"]
    assert {r["feedback_verdict"] for r in stored} == {"correct", "incorrect"}


def _from_wrong_first(steps):
    """The steps with step 1's result off by one and every later step computed right from the wrong value."""
    from binac_core.benchmarks.synthetic import Step

    first = steps[0]
    out, value = [Step(first.a, first.op, first.b, (first.c + 1) % 10, first.width)], (first.c + 1) % 10
    for s in steps[1:]:
        c = (value + s.b if s.op == "+" else value - s.b) % 10
        out.append(Step(value, s.op, s.b, c, s.width))
        value = c
    return out


# --------------------------------------------------------------------------- the verdict bonus, by hand


def test_the_critic_reward_gains_the_verdict_bonus_worked_out_by_hand(tmp_path):
    """Two attempts (wrong r0 = 0, right r0 = 1), K = 2 feedbacks each. Verdicts: wrong attempt [incorrect,
    correct], right attempt [correct, none]. Penalty form, λ = 0.5, α = 1 → μ = 1: (1 + μ)·r1 − μ·r1⁺ with
    r1 = [1, 0, 1, 1], r1⁺ = [1, 0, 0, 1] gives [1, 0, 2, 1]; the bonus at w = 0.5 is [0.5, 0, 0.5, 0] (a match,
    flattery, a match, no verdict): [1.5, 0, 2.5, 1]. At w = 0 the rewards are the penalty form's alone."""
    from verdict_case import verdict_case

    from binac_core.foundation.files import read_json
    from tasks.critic_update import critic_reward_task

    cfg_d, files = verdict_case(tmp_path)

    def reward(w, folder):
        (tmp_path / folder).mkdir()
        out = critic_reward_task.fn(
            cfg_d,
            out_dir=str(tmp_path / folder),
            form=CriticRewardForm.PENALTY,
            verdict_weight=w,
            seed=0,
            step=1,
            **files,
        )
        return read_json(out)

    assert reward(0.5, "w") == pytest.approx([1.5, 0.0, 2.5, 1.0])
    assert reward(0.0, "none") == pytest.approx([1.0, 0.0, 2.0, 1.0])


def test_binac_disc_is_binac_with_verdict_weight_one_and_the_others_read_the_config():
    from binac_core.foundation.config import load_config
    from binac_core.rl.methods import METHODS, method_spec

    cfg = load_config("micro")
    weighted = cfg.model_copy(update={"train": cfg.train.model_copy(update={"critic_verdict_weight": 0.25})})
    disc, binac = method_spec("binac_disc"), method_spec("binac")
    assert "binac_disc" in METHODS
    assert disc.critic_verdict_weight(cfg) == 1.0 and disc.critic_verdict_weight(weighted) == 1.0
    assert binac.critic_verdict_weight(cfg) == 0.0 and binac.critic_verdict_weight(weighted) == 0.25
    assert (disc.feedback, disc.train_critic, disc.lookahead, disc.critic_reward) == (
        binac.feedback,
        binac.train_critic,
        binac.lookahead,
        binac.critic_reward,
    )
