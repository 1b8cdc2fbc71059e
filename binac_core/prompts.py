"""Every prompt the pipeline sends, in one module: actor (first attempt), critic, and refinement templates.

Each builder returns chat messages (`[{"role": ..., "content": ...}]`); the tokenizer's chat template renders
them. One user message each, no system message (not every chat template has one). The synthetic task family keeps
its compact templates in `binac_core.synthetic`; the benchmark templates follow the project notes:

- math (`math`, `math500`, `gsm8k`): "solve step by step", final answer in `\\boxed{}` (notes §E.1; the
  precursor's evaluation prompt, binac-paper notes §4).
- code (`mbpp`): lm-eval's MBPP wording, "You are an expert Python programmer, and here is your task: ... Your
  code should pass these tests:" (the row's question already holds the three asserts), answer in a ```python block
  (https://github.com/EleutherAI/lm-evaluation-harness/blob/main/lm_eval/tasks/mbpp/mbpp.yaml).
- multiple choice (`gpqa_diamond`): simple-evals' GPQA template, last line `Answer: $LETTER`
  (https://github.com/openai/simple-evals/blob/main/gpqa_eval.py); the row's question holds options A-D.
- critics: math tutor / programming mentor / science reviewer, after the precursor code's critic prompts
  (binac-paper notes §4): point out errors, do not solve, be short.

The critic never sees the reference answer: `critic_messages` reads only `row["question"]`, the attempt and (for
code) the execution error, nothing else of the row.
"""

from __future__ import annotations

from binac_core.errors import BinacError

SELF_CORRECT_FEEDBACK = "There may be an error in your attempt. Re-check each step."
"""The fixed second-turn instruction of the `self_correct` baseline (SCoRe-style: no critic, same words always)."""

MATH_BENCHMARKS = ("math", "math500", "gsm8k")
CODE_BENCHMARKS = ("mbpp",)
CHOICE_BENCHMARKS = ("gpqa_diamond",)

MATH_FORMAT = "Show your reasoning step by step, then write the final answer as \\boxed{ANSWER}."
CODE_FORMAT = "Write your complete solution as Python code in a single ```python code block."
CHOICE_FORMAT = (
    "The last line of your response should be of the following format: 'Answer: $LETTER' (without quotes) "
    "where LETTER is one of ABCD. Think step by step before answering."
)

MATH_CRITIC = (
    "You are an expert math tutor. Review the problem and a student's attempt. Point out the critical errors: "
    "conceptual mistakes, wrong steps or calculation slips. Give a short list of hints, as direct instructions "
    "('Do X', 'Avoid Y'). Do NOT solve the problem and do NOT state the final answer."
)
CODE_CRITIC = (
    "You are an expert programming mentor. Analyze the solution below for bugs, wrong logic or unhandled edge "
    "cases, using the execution result. Write a brief, helpful instruction for fixing it. Do NOT solve the task "
    "yourself and do NOT write any code: reply with ONLY the instruction."
)
CHOICE_CRITIC = (
    "You are an expert science reviewer. Review the question and a student's answer. Point out factual errors, "
    "flawed reasoning or misread options in a few short sentences. Do NOT say which option is correct."
)


def actor_messages(benchmark: str, row: dict) -> list[dict]:
    """The first-attempt prompt for one problem."""
    if benchmark == "synthetic":
        from binac_core import synthetic

        return synthetic.actor_messages(row)
    kind = _kind(benchmark)
    question = row["question"]
    if kind == "math":
        text = f"Solve the following math problem step by step.\n\nProblem:\n{question}\n\n{MATH_FORMAT}"
    elif kind == "code":
        text = f"You are an expert Python programmer, and here is your task: {question}\n\n{CODE_FORMAT}"
    else:
        text = f"Answer the following multiple choice question. {CHOICE_FORMAT}\n\n{question}"
    return _user(text)


def critic_messages(benchmark: str, row: dict, attempt: str, exec_error: str | None = None) -> list[dict]:
    """The critic's prompt: the problem, the attempt, and for code the execution result. Never the reference."""
    if benchmark == "synthetic":
        from binac_core import synthetic

        return synthetic.critic_messages(row, attempt)
    kind = _kind(benchmark)
    question = row["question"]
    if kind == "math":
        text = f"{MATH_CRITIC}\n\nProblem:\n{question}\n\nStudent attempt:\n{attempt}\n\nHints:"
    elif kind == "code":
        from binac_core.grading.code import extract_program

        result = exec_error or "(not run)"
        text = (
            f"{CODE_CRITIC}\n\nTask:\n{question}\n\nSolution:\n```python\n{extract_program(attempt).strip()}\n```"
            f"\n\nExecution result:\n{result}\n\nInstruction:"
        )
    else:
        text = f"{CHOICE_CRITIC}\n\nQuestion:\n{question}\n\nStudent answer:\n{attempt}\n\nReview:"
    return _user(text)


def refine_messages(benchmark: str, row: dict, attempt: str, feedback: str) -> list[dict]:
    """The second-attempt prompt: problem, first attempt, feedback, "fix it", and the answer format again."""
    if benchmark == "synthetic":
        from binac_core import synthetic

        return synthetic.refine_messages(row, attempt, feedback)
    kind = _kind(benchmark)
    fmt = {"math": MATH_FORMAT, "code": CODE_FORMAT, "choice": CHOICE_FORMAT}[kind]
    label = {"math": "Problem", "code": "Task", "choice": "Question"}[kind]
    text = (
        f"{label}:\n{row['question']}\n\nYour initial attempt:\n{attempt}\n\nFeedback on your attempt:\n{feedback}"
        f"\n\nUse the feedback to fix the mistakes in your attempt and answer again. {fmt}"
    )
    return _user(text)


def _kind(benchmark: str) -> str:
    if benchmark in MATH_BENCHMARKS:
        return "math"
    if benchmark in CODE_BENCHMARKS:
        return "code"
    if benchmark in CHOICE_BENCHMARKS:
        return "choice"
    known = ", ".join(sorted((*MATH_BENCHMARKS, *CODE_BENCHMARKS, *CHOICE_BENCHMARKS, "synthetic")))
    raise BinacError(f"unknown benchmark {benchmark!r} for prompts (known: {known})")


def _user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]
