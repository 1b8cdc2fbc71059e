"""The synthetic task family: seeded splits, grading, the oracle critic, prompts (binac_core/benchmarks/synthetic.py)
and the noisy teacher of the pretraining corpus (binac_core/pretrain_teacher.py)."""

import random

import pytest

from binac_core import pretrain_teacher as teacher
from binac_core.benchmarks import synthetic as syn
from binac_core.config import load_config
from binac_core.errors import BinacError
from binac_core.pretrain import teacher_corpus
from binac_core.prompts import SELF_CORRECT_FEEDBACK

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
