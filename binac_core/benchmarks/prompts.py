"""The prompt text the benchmarks share: the answer formats, the critic instructions, the second-turn template
and the self-correction baseline's fixed feedback. Each benchmark builds its three prompts (actor, critic,
refinement) in its module under `binac_core/benchmarks/`; nothing here dispatches on a benchmark.

Each prompt is chat messages (`[{"role": ..., "content": ...}]`); the tokenizer's chat template renders them. One
user message each, no system message (not every chat template has one). The synthetic task family keeps its
compact templates in `binac_core.benchmarks.synthetic`; the benchmark templates follow the project notes:

- math (`math`, `math500`, `gsm8k`): "solve step by step", final answer in `\\boxed{}` (notes §E.1; the
  precursor's evaluation prompt, binac-paper notes §4).
- code (`mbpp`): lm-eval's MBPP wording, "You are an expert Python programmer, and here is your task: ... Your
  code should pass these tests:" (the row's question already holds the three asserts), answer in a ```python block
  (https://github.com/EleutherAI/lm-evaluation-harness/blob/main/lm_eval/tasks/mbpp/mbpp.yaml).
- multiple choice (`gpqa_diamond`): simple-evals' GPQA template, last line `Answer: $LETTER`
  (https://github.com/openai/simple-evals/blob/main/gpqa_eval.py); the row's question holds options A-D.
- critics: math tutor / programming mentor / science reviewer, after the precursor code's critic prompts
  (binac-paper notes §4): point out errors, do not solve, be short.

With `critic.verdict` (on by default; off reproduces the prompts of runs before it) each benchmark's critic
instruction ends with `VERDICT`: after the feedback, one last line `Verdict: correct` or `Verdict: incorrect` on
the attempt (`critic_instruction`). The verdict line is part of the feedback, so the actor sees it in its second
turn; `binac_core.benchmarks.verdict` reads it, `binac_core.reports.measures` scores it against the verifier. The synthetic task's
feedback is a verdict already: its prompts do not change.

The critic never sees the reference answer: every benchmark's `critic_messages` reads only `row["question"]`, the
attempt and (for code) the execution error, nothing else of the row.
"""

from __future__ import annotations

SELF_CORRECT_FEEDBACK = "There may be an error in your attempt. Re-check each step."
"""The fixed second-turn instruction of the `self_correct` baseline (SCoRe-style: no critic, same words always)."""

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

VERDICT = (
    "Then end with one last line, exactly 'Verdict: correct' if the {what} is correct or 'Verdict: incorrect' if "
    "it is not."
)
"""The verdict request appended to a critic instruction (`critic_instruction`); `{what}` names the attempt as the
prompt does (attempt, solution, answer). `binac_core.benchmarks.verdict.VERDICT_LINE` parses the line."""


def critic_instruction(instruction: str, verdict: bool, what: str) -> str:
    """A benchmark's critic instruction, with the verdict request (`VERDICT`) when `verdict`; unchanged without."""
    return f"{instruction} {VERDICT.format(what=what)}" if verdict else instruction


def second_turn(label: str, fmt: str, question: str, attempt: str, feedback: str) -> list[dict]:
    """The benchmarks' second-attempt prompt: problem, first attempt, feedback, "fix it", and the answer format
    again. `label` names the problem (`Problem`, `Task`, `Question`), `fmt` is the answer format."""
    return user(
        f"{label}:\n{question}\n\nYour initial attempt:\n{attempt}\n\nFeedback on your attempt:\n{feedback}"
        f"\n\nUse the feedback to fix the mistakes in your attempt and answer again. {fmt}"
    )


def user(text: str) -> list[dict]:
    """One user message."""
    return [{"role": "user", "content": text}]
