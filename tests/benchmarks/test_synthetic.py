"""The synthetic task family: seeded splits, grading, the oracle critic, prompts (binac_core/benchmarks/synthetic.py)
and the noisy teacher of the pretraining corpus (binac_core/model/pretrain_teacher.py)."""

import random

import pytest

from binac_core.benchmarks import synthetic as syn
from binac_core.benchmarks.prompts import SELF_CORRECT_FEEDBACK
from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.model import pretrain_teacher as teacher
from binac_core.model.pretrain import teacher_corpus

ROW = syn.make_row("7+5-3+4")  # 7+5=2, 2-3=9, 9+4=3


def task(**kw):
    return load_config("micro", {f"task.{k}": v for k, v in kw.items()}).task


def test_hand_computed_row():
    assert ROW["answer"] == "3"
    assert ROW["solution"] == "7+5=2 2-3=9 9+4=3 A: 3"
    assert syn.make_row("3-5-9")["solution"] == "3-5=8 8-9=9 A: 9"
    assert syn.parse_question("0+9-1") == (0, [("+", 9), ("-", 1)])


def test_split_is_deterministic_in_seed():
    assert syn.make_split(task(data_seed=1), "train") == syn.make_split(task(data_seed=1), "train")
    assert syn.make_split(task(data_seed=1), "eval") != syn.make_split(task(data_seed=2), "eval")


def test_train_eval_and_pretraining_are_disjoint():
    train = {r["question"] for r in syn.make_split(task(n_train=2000), "train")}
    evals = {r["question"] for r in syn.make_split(task(n_test=300), "eval")}
    assert len(train) == 2000 and len(evals) == 300  # distinct rows
    assert not train & evals
    assert all(syn.split_of(q) == "eval" for q in evals)
    corpus = teacher_corpus(task(), 500)
    pretrain = {conv[0]["content"].split(": ", 1)[1].split("\n")[0] for conv in corpus}
    assert pretrain and not pretrain & evals
    assert all(syn.split_of(q) == "train" for q in pretrain)


@pytest.mark.parametrize("difficulty", [1, 3, 6])
def test_difficulty_is_the_number_of_steps(difficulty):
    rows = syn.make_split(task(difficulty=difficulty, n_test=20), "eval")
    for r in rows:
        assert len(r["question"]) == 2 * difficulty + 1
        assert len(syn.parse_steps(r["solution"])) == difficulty
        assert r["difficulty"] == difficulty


def test_too_small_question_space_fails_with_the_value():
    with pytest.raises(BinacError, match="difficulty 1"):
        syn.make_split(task(difficulty=1, n_test=200), "eval")


@pytest.mark.parametrize(
    "response, score",
    [
        ("7+5=2 2-3=9 9+4=3 A: 3", 1.0),
        ("A:3", 1.0),
        ("A: 3.", 1.0),
        ("A: 2 then A: 3", 1.0),  # the last answer counts
        ("7+5=2 2-3=9 9+4=3 A: 2", 0.0),
        ("A: 33", 0.0),
        ("A:", 0.0),
        ("the answer is 3", 0.0),
        ("", 0.0),
        ("=0- 5 A:+7=39 ogoe", 0.0),
    ],
)
def test_grader(response, score):
    assert syn.grade_response(ROW, response) == score


def test_oracle_names_the_first_wrong_step():
    assert syn.oracle_feedback(ROW, "7+5=2 2-3=8 8+4=2 A: 2") == "Step 2 is wrong."
    assert syn.oracle_feedback(ROW, "7+5=3 3-3=0 0+4=4 A: 4") == "Step 1 is wrong."
    assert syn.oracle_feedback(ROW, "7+5=2 2-3=9 9+4=3 A: 3") == syn.LOOKS_CORRECT
    assert syn.oracle_feedback(ROW, "7+5=2") == "Step 2 is wrong."
    assert syn.oracle_feedback(ROW, "7+5=2 2-3 9+4=3 A: 3") == "Step 2 is wrong."
    assert syn.oracle_feedback(ROW, "7+5=2 2-3=9 9+4=3 A: 5") == syn.CHECK_YOUR_WORK
    assert syn.named_step(syn.oracle_feedback(ROW, "7+5=2 2-3=9 9+4=1 A: 1")) == 3


def test_critic_prompt_never_holds_the_reference():
    rng = random.Random(0)
    for r in syn.make_split(task(n_test=100), "eval"):
        attempt = teacher.teacher_solve(r["question"], rng, 0.5)
        text = " ".join(m["content"] for m in syn.critic_messages(r, attempt))
        assert r["question"] in text and attempt in text
        if attempt != r["solution"]:
            assert r["solution"] not in text
        if syn.grade_response(r, attempt) == 0.0:
            assert f"A: {r['answer']}" not in text


def test_prompts_are_chat_messages():
    for msgs in (
        syn.actor_messages(ROW),
        syn.critic_messages(ROW, "x"),
        syn.refine_messages(ROW, "x", "Check your work."),
    ):
        assert msgs[-1]["role"] == "user" and all(set(m) == {"role", "content"} for m in msgs)
    refine = syn.refine_messages(ROW, "x", "y")
    assert [m["role"] for m in refine] == ["user", "assistant", "user"]
    assert refine[-1]["content"].endswith(syn.actor_messages(ROW)[0]["content"])  # same suffix as solving


def test_teacher_solution_noise():
    rng = random.Random(0)
    assert teacher.teacher_solve(ROW["question"], rng, 0.0) == ROW["solution"]
    noisy = [teacher.teacher_solve(ROW["question"], rng, 1.0) for _ in range(20)]
    for trace in noisy:
        steps = syn.parse_steps(trace)
        assert not any(s.locally_right for s in steps)
        assert all(b.a == a.c for a, b in zip(steps, steps[1:], strict=False))  # errors propagate
        assert syn.final_answer(trace) == str(steps[-1].c)


def test_teacher_critique_mixture():
    rng = random.Random(0)
    wrong, right = "7+5=2 2-3=8 8+4=2 A: 2", ROW["solution"]
    q = ROW["question"]
    assert teacher.teacher_critique(q, wrong, rng, 1.0, 0.0) == "Step 2 is wrong."
    assert teacher.teacher_critique(q, right, rng, 1.0, 0.0) == syn.LOOKS_CORRECT
    misleading = {teacher.teacher_critique(q, wrong, rng, 0.0, 1.0) for _ in range(30)}
    assert misleading == {"Step 1 is wrong.", "Step 3 is wrong."}  # never the real error, step 2
    assert {syn.named_step(teacher.teacher_critique(q, right, rng, 0.0, 1.0)) for _ in range(30)} == {1, 2, 3}
    vague = {teacher.teacher_critique(q, wrong, rng, 0.0, 0.0) for _ in range(30)}
    assert vague == {SELF_CORRECT_FEEDBACK, syn.CHECK_YOUR_WORK}


def test_teacher_refinement_follows_the_feedback():
    rng = random.Random(0)
    q, wrong = ROW["question"], "7+5=2 2-3=8 8+4=2 A: 2"
    assert teacher.teacher_refine(q, wrong, "Step 2 is wrong.", rng, 0.0) == ROW["solution"]
    assert teacher.teacher_refine(q, wrong, syn.LOOKS_CORRECT, rng, 0.0) == wrong
    assert teacher.teacher_refine(q, wrong, SELF_CORRECT_FEEDBACK, rng, 0.0) == ROW["solution"]  # re-solves
    # A misleading hint on a correct attempt breaks it: step 1 kept, step 2 changed.
    for _ in range(10):
        out = teacher.teacher_refine(q, ROW["solution"], "Step 2 is wrong.", rng, 0.0)
        steps = syn.parse_steps(out)
        assert steps[0].text == "7+5=2" and steps[1].c != 9
        assert syn.grade_response(ROW, out) == 0.0


# --------------------------------------------------------------------------- the two-digit family (task.modulus 100)

ROW100 = syn.make_row("07+5-9+4")  # 07+5=12, 12-9=03, 03+4=07


def test_two_digit_row_by_hand():
    assert ROW100["solution"] == "07+5=12 12-9=03 03+4=07 A: 07"
    assert ROW100["answer"] == "07" and ROW100["difficulty"] == 3
    assert syn.modulus_of("07+5-9+4") == 100 and syn.modulus_of("7+5-3") == 10
    assert syn.parse_question("99+3-1") == (99, [("+", 3), ("-", 1)])
    assert syn.make_row("98+5")["solution"] == "98+5=03 A: 03"  # wraps modulo 100
    assert syn.make_row("02-5")["solution"] == "02-5=97 A: 97"


def test_two_digit_grader_and_oracle():
    assert syn.grade_response(ROW100, "07+5=12 12-9=03 03+4=07 A: 07") == 1.0
    assert syn.grade_response(ROW100, "A: 7") == 0.0  # the answer is written two digits wide
    assert syn.oracle_feedback(ROW100, "07+5=12 12-9=04 04+4=08 A: 08") == "Step 2 is wrong."
    assert syn.oracle_feedback(ROW100, ROW100["solution"]) == syn.LOOKS_CORRECT
    assert syn.oracle_feedback(ROW100, "7+5=12 12-9=03 03+4=07 A: 07") == "Step 1 is wrong."  # width counts
    # Two wrong steps that cancel: a right answer over wrong steps, which the critic measures must not call right.
    lucky = "07+5=13 13-9=03 03+4=07 A: 07"
    assert syn.grade_response(ROW100, lucky) == 1.0 and syn.first_wrong_step(ROW100["question"], lucky) == 1


def test_two_digit_split_and_guessing_floor():
    cfg = task(modulus=100, difficulty=6, n_test=300)
    rows = syn.make_split(cfg, "eval")
    assert len({r["question"] for r in rows}) == 300 and all(syn.modulus_of(r["question"]) == 100 for r in rows)
    assert all(len(r["answer"]) == 2 for r in rows)
    assert len({r["answer"] for r in rows}) > 90  # answers spread over the 100 values: a guess is right ~1 %
    assert syn.make_split(task(difficulty=6, n_test=50), "eval")[0]["question"] != rows[0]["question"]


def test_two_digit_teacher_noise_draws_other_values_and_errors_propagate():
    rng = random.Random(0)
    q = "50+1+1+1+1+1+1"
    traces = [teacher.teacher_solve(q, rng, 1.0) for _ in range(200)]
    for trace in traces:
        steps = syn.parse_steps(trace, 2)
        assert len(steps) == 6 and not any(s.locally_right for s in steps)
        assert all(b.a == a.c for a, b in zip(steps, steps[1:], strict=False))
    # the wrong values are spread over the modulus, not confined to one digit
    assert len({syn.parse_steps(t, 2)[0].c for t in traces}) > 60
    assert sum(syn.grade_response(syn.make_row(q), t) for t in traces) <= 6  # lucky answers stay rare (~1 %)


def test_teacher_false_approval_is_a_misleading_form_on_wrong_attempts_only():
    rng = random.Random(0)
    q, wrong, right = ROW100["question"], "07+5=12 12-9=04 04+4=08 A: 08", ROW100["solution"]
    assert {teacher.teacher_critique(q, wrong, rng, 0.0, 1.0, 1.0) for _ in range(20)} == {syn.LOOKS_CORRECT}
    # on a step-correct attempt approval is the truth, so the misleading branch names a right step instead
    assert {syn.named_step(teacher.teacher_critique(q, right, rng, 0.0, 1.0, 1.0)) for _ in range(40)} == {1, 2, 3}
    mixed = [teacher.teacher_critique(q, wrong, rng, 0.0, 1.0, 0.5) for _ in range(400)]
    assert 150 < sum(m == syn.LOOKS_CORRECT for m in mixed) < 250
    assert {m for m in mixed if m != syn.LOOKS_CORRECT} == {"Step 1 is wrong.", "Step 3 is wrong."}


def test_teacher_without_false_approval_draws_what_it_drew_before():
    """`critic_false_approval_rate` 0 (tiny, micro) leaves the corpus as it was: approval only on right attempts."""
    corpus = teacher_corpus(task(), 3000)
    critiques = [(c[0]["content"], c[1]["content"]) for c in corpus if c[0]["content"].startswith("Check:")]
    approved = [(p, f) for p, f in critiques if f == syn.LOOKS_CORRECT]
    assert approved
    for prompt, _ in approved:
        question, attempt = prompt.removeprefix("Check: ").split("\nAttempt: ")
        assert syn.first_wrong_step(question, attempt) is None


def test_after_approval_the_refinement_copies_the_attempt_errors_included():
    rng = random.Random(0)
    q, wrong = ROW100["question"], "07+5=12 12-9=04 04+4=08 A: 08"
    assert teacher.teacher_refine(q, wrong, syn.LOOKS_CORRECT, rng, 0.25) == wrong
    # the corpus of the two-digit teacher: every approved wrong attempt's refinement is wrong (no shortcut)
    corpus = teacher_corpus(task(modulus=100, critic_false_approval_rate=0.5, difficulty=5), 4000)
    copies = [c for c in corpus if len(c) == 4 and c[2]["content"].startswith(f"Feedback: {syn.LOOKS_CORRECT}")]
    wrong_approved = [
        c for c in copies if syn.first_wrong_step(c[0]["content"].removeprefix("Solve: "), c[1]["content"]) is not None
    ]
    assert wrong_approved and all(c[3]["content"] == c[1]["content"] for c in copies)


def test_after_approval_the_answer_form_restates_only_the_attempts_answer():
    """`task.approval_refinement: answer` (study2): the answer line alone, errors included; a step hint or vague
    feedback is refined exactly as with `copy`, drawing the same random numbers."""
    q, wrong = ROW100["question"], "07+5=12 12-9=04 04+4=08 A: 08"
    assert teacher.teacher_refine(q, wrong, syn.LOOKS_CORRECT, random.Random(0), 0.25, "answer") == "A: 08"
    assert syn.grade_response(ROW100, "A: 08") == 0.0 and syn.grade_response(ROW100, "A: 07") == 1.0
    assert teacher.teacher_refine(q, "junk", syn.LOOKS_CORRECT, random.Random(0), 0.25, "answer") == "junk"
    for feedback in ("Step 2 is wrong.", syn.CHECK_YOUR_WORK):
        assert teacher.teacher_refine(q, wrong, feedback, random.Random(3), 0.25, "answer") == teacher.teacher_refine(
            q, wrong, feedback, random.Random(3), 0.25, "copy"
        )
    corpus = teacher_corpus(
        task(modulus=100, critic_false_approval_rate=0.5, approval_refinement="answer", difficulty=5), 4000
    )
    approved = [c for c in corpus if len(c) == 4 and c[2]["content"].startswith(f"Feedback: {syn.LOOKS_CORRECT}")]
    assert approved and all(c[3]["content"] == f"A: {syn.final_answer(c[1]['content'])}" for c in approved)


def test_step_hint_redoes_the_step_and_continues_with_first_attempt_noise():
    q, wrong = ROW100["question"], "07+5=12 12-9=04 04+4=08 A: 08"
    assert teacher.teacher_refine(q, wrong, "Step 2 is wrong.", random.Random(0), 0.0) == ROW100["solution"]
    outs = [teacher.teacher_refine(q, wrong, "Step 2 is wrong.", random.Random(i), 1.0) for i in range(50)]
    for out in outs:
        steps = syn.parse_steps(out, 2)
        assert steps[0].text == "07+5=12" and steps[1].text == "12-9=03"  # kept, then the named step redone
        assert not steps[2].locally_right  # the rest with the first attempt's noise (here: always wrong)


def test_instruct_prompts_refuse_the_two_digit_family():
    with pytest.raises(BinacError, match="task.modulus is 100"):
        syn.make_split(task(modulus=100, prompt_style="instruct"), "eval")


# --------------------------------------------------------------------------- the testbed's teacher


def test_carries_and_the_carry_slip_by_hand():
    assert syn.carries(37, "+", 5) and not syn.carries(32, "+", 5) and syn.carries(32, "-", 5)
    assert not syn.carries(37, "-", 5) and syn.carries(97, "+", 5) and syn.carries(3, "-", 5)
    assert syn.carry_slip(37, "+", 5, 2) == 32 and syn.carry_slip(32, "-", 5, 2) == 17
    assert syn.carry_slip(97, "+", 5, 2) == 92 and syn.carry_slip(3, "-", 5, 2) == 88  # 02 and 98 less 10
    with pytest.raises(BinacError, match="two-digit"):
        syn.carry_slip(7, "+", 5, 1)


def test_the_teacher_slips_on_carrying_steps_only_and_slips_never_cancel():
    rng = random.Random(0)
    q = "37+5-8+1-1"  # steps 1 (carry) and 2 (borrow) carry, 3 and 4 do not
    traces = [teacher.teacher_solve(q, rng, 0.0, 1.0) for _ in range(20)]
    assert set(traces) == {"37+5=32 32-8=14 14+1=15 15-1=14 A: 14"}  # each carrying step 10 low: 42->32, 34->14
    assert syn.grade_response(syn.make_row(q), traces[0]) == 0.0
    slipped = [syn.parse_steps(teacher.teacher_solve(q, rng, 0.0, 0.6), 2)[0].c == 32 for _ in range(2000)]
    assert 1100 < sum(slipped) < 1300  # 0.6 of 2000
    with pytest.raises(BinacError, match="carry_error_rate needs task.modulus 100"):
        task(carry_error_rate=0.5)


def test_a_careful_student_fixes_the_rest_after_a_first_error_hint_and_breaks_a_right_step():
    rng = random.Random(0)
    q = "37+5-8+1-1"
    slipped = teacher.teacher_solve(q, rng, 0.0, 1.0)
    right = syn.make_row(q)["solution"]
    # careful: the named first wrong step and every later carrying step are written right
    assert teacher.teacher_refine(q, slipped, "Step 1 is wrong.", rng, 0.0, "answer", 1.0, True) == right
    # not careful: the later borrow slips again, as in a first attempt
    assert (
        syn.parse_steps(teacher.teacher_refine(q, slipped, "Step 1 is wrong.", rng, 0.0, "answer", 1.0), 2)[1].c == 24
    )
    # a hint at a right step: the student trusts it, changes that step and the answer goes wrong
    fixed = teacher.teacher_refine(q, right, "Step 3 is wrong.", rng, 0.0, "answer", 1.0, True)
    assert syn.parse_steps(fixed, 2)[:2] == syn.parse_steps(right, 2)[:2] and not syn.grade_response(
        syn.make_row(q), fixed
    )


def test_checked_critiques_restate_and_mark_the_steps_up_to_the_verdict():
    row = {**syn.make_row("37+5-8+1"), "checks": True}  # 42, 34, 35
    wrong = "37+5=42 42-8=24 24+1=25 A: 25"
    assert syn.oracle_feedback(row, wrong) == "37+5=42 ok 42-8=24 no. Step 2 is wrong."
    assert syn.oracle_feedback(row, row["solution"]) == "37+5=42 ok 42-8=34 ok 34+1=35 ok. Looks correct."
    assert syn.oracle_feedback(row, "37+5=42 A: 42") == "37+5=42 ok. Step 2 is wrong."  # a missing step
    assert syn.oracle_feedback(syn.make_row("37+5-8+1"), wrong) == "Step 2 is wrong."  # without checks
    fb = syn.oracle_feedback(row, wrong)
    assert syn.named_step(fb) == 2 and not syn.approves(fb)
    assert syn.VERDICT_SYNTAX.incorrect.search(fb) and not syn.VERDICT_SYNTAX.correct.search(fb)
    rng = random.Random(0)
    misleading = {teacher.teacher_critique(row["question"], wrong, rng, 0.0, 1.0, 0.5, True) for _ in range(60)}
    assert misleading == {
        "37+5=42 ok 42-8=24 ok 24+1=25 ok. Looks correct.",  # a false approval
        "37+5=42 no. Step 1 is wrong.",
        "37+5=42 ok 42-8=24 ok 24+1=25 no. Step 3 is wrong.",
    }
    rows = syn.make_split(load_config("testbed", {"task.n_test": 5}).task, "eval")
    assert all(r["checks"] for r in rows) and "checks" not in syn.make_split(task(n_test=5), "eval")[0]


def test_the_validation_split_is_carved_out_of_the_training_side_and_never_pretrained_on():
    t = task(difficulty=4, n_val=50)
    val, train, held = (syn.make_split(t, s) for s in ("val", "train", "eval"))
    assert len(val) == 50 and {syn.split_of(r["question"]) for r in val} == {"val"}
    questions = {r["question"] for r in val}
    assert not questions & {r["question"] for r in train} and not questions & {r["question"] for r in held}
    shares = [syn.split_of(syn.random_question(random.Random(i), 6, 100)) for i in range(3000)]
    assert 0.07 < shares.count("val") / 3000 < 0.13 and 0.17 < shares.count("eval") / 3000 < 0.23
    corpus = teacher_corpus(task(difficulty=4), 2000)
    asked = [c[0]["content"].split("\n")[0].split(": ", 1)[1] for c in corpus]  # `Solve: q` or `Check: q`
    assert {syn.split_of(q) for q in asked} == {"train"}
    with pytest.raises(BinacError, match="unknown split 'dev'"):
        syn.make_split(t, "dev")


def test_the_critique_in_the_critics_form_approves_or_names_any_step():
    wrong = "37+5=42 42-8=24 24+1=25 A: 25"
    row = syn.make_row("37+5-8+1")
    assert syn.critique(row, wrong, None) == syn.LOOKS_CORRECT and syn.critique(row, wrong, 1) == "Step 1 is wrong."
    checks = {**row, "checks": True}
    assert syn.critique(checks, wrong, None) == "37+5=42 ok 42-8=24 ok 24+1=25 ok. Looks correct."
    assert syn.critique(checks, wrong, 3) == "37+5=42 ok 42-8=24 ok 24+1=25 no. Step 3 is wrong."
    assert syn.critique(checks, wrong, 2) == syn.oracle_feedback(checks, wrong)
