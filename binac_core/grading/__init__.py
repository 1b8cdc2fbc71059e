"""The graders, one module per answer format; `binac_core.benchmarks.grade` dispatches to them by benchmark (the
one grading function both RL rewards and evaluation use). Each benchmark's `grade` calls:

| benchmark | grader |
| --- | --- |
| `math`, `math500` | last `\\boxed{}` vs `row["answer"]`: normalised string match, else math-verify in a worker process |
| `gsm8k` | final number of the response vs `row["answer"]`, compared as numbers |
| `gpqa_diamond` | last `Answer: X` line (simple-evals regex) vs the letter `row["answer"]` |
| `mbpp` | program from the last code block, run with `row["setup"]` and the asserts `row["tests"]` in the sandbox |
| `synthetic` | `binac_core.benchmarks.synthetic.grade_response` |

Failures are counted in `counters` (`grader_counts()`); the sandbox for untrusted code is `sandbox`
(threat model: docs/sandbox.md).
"""
