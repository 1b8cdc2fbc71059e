"""The greedy evaluation protocol `single_greedy` (binac_core/rl/evaluation.py): on a real (tiny, random) Llama
checkpoint its answers are the same on two evaluations with other seeds and steps, while the sampled `single`
answers change; it is stored under its own protocol name and logged as `eval/acc_single_greedy`; training runs it
on the synthetic task by default (`generation.eval_greedy`)."""

import pytest
import torch
from tiny_checkpoint import build_checkpoint

from binac_core.benchmarks import synthetic
from binac_core.foundation.config import load_config
from binac_core.model.generation import HFBackend
from binac_core.rl.evaluation import (
    GREEDY,
    Evaluation,
    evaluate_protocols,
    greedy_evaluated,
    training_protocols,
)
from binac_core.rl.methods import FeedbackSource

GEN = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8, "feedback_max_new_tokens": 8}
QUESTIONS = ("7+5", "3-4", "9+9-2", "1+1", "6-8+3", "2+2")


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    from binac_core.model.policy import Policy

    base = build_checkpoint(tmp_path_factory.mktemp("greedy") / "model", hostile=True, eos_logit=1.0)
    policy = Policy(base, load_config("micro"), seed=0)
    with torch.no_grad():  # an actor far from LoRA's identity start
        for n, p in policy.model.named_parameters():
            if ".actor." in n and "lora_B" in n:
                p.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(p.numel()))
    return HFBackend(policy, 4), policy.save("actor", tmp_path_factory.mktemp("greedy-actor") / "actor")


def _evaluate(backend, seed: int, step: int) -> Evaluation:
    be, actor = backend
    rows = [synthetic.make_row(q) for q in QUESTIONS]
    return evaluate_protocols(
        be,
        "synthetic",
        rows,
        actor=actor,
        critic=None,
        samples=2,
        gen=GEN,
        seed=seed,
        step=step,
        protocols=("single", GREEDY),
    )


def test_a_greedy_evaluation_is_deterministic_and_the_sampled_one_is_not(backend):
    one, two = _evaluate(backend, seed=0, step=0), _evaluate(backend, seed=5, step=3)
    greedy = [(a.problem_id, a.token_ids) for a in one.single_greedy.attempts]
    assert greedy == [(a.problem_id, a.token_ids) for a in two.single_greedy.attempts]
    assert len(greedy) == len(QUESTIONS), "one greedy answer per problem, whatever `samples`"
    assert one.metrics["acc_single_greedy"] == two.metrics["acc_single_greedy"]
    assert [a.token_ids for a in one.single.attempts] != [a.token_ids for a in two.single.attempts]
    again = Evaluation.from_json(one.to_json())
    assert [a.token_ids for a in again.single_greedy.attempts] == [t for _, t in greedy]


def test_the_greedy_protocol_is_stored_under_its_name_and_logged_as_acc_single_greedy(tmp_path):
    from binac_core.foundation.workspace import Workspace
    from binac_core.model.generation import Generation
    from binac_core.reports.step_metrics import eval_metrics
    from binac_core.store import sqlrun
    from binac_core.store.identity import RunIdentity
    from binac_core.store.step_records import store_eval

    class Fixed:
        """Answers 7+5 right ("7+5=2 A: 2", modulus 10) and everything else wrong; records the temperatures."""

        def __init__(self):
            self.temperatures = []

        def generate(self, prompts, adapter, params):
            self.temperatures.append(params.temperature)
            return [Generation("7+5=2 A: 2", [1], [2], [0.0]) for _ in prompts]

    rows = [synthetic.make_row(q) for q in ("7+5", "3-4")]
    be = Fixed()
    result = evaluate_protocols(
        be, "synthetic", rows, actor=None, critic=None, samples=3, gen=GEN, seed=0, step=0, protocols=("single", GREEDY)
    )
    assert be.temperatures == [1.0, 0.0]
    assert result.metrics == {"acc_single": 0.5, "acc_single_greedy": 0.5}
    ws = Workspace(tmp_path / "home")
    run = RunIdentity(run_id="r", method="grpo", preset="micro", seed=0, benchmark="synthetic")
    metrics = eval_metrics(result, store_eval(ws, run, 0, result, rows), critic_measures=True)
    assert metrics["eval/acc_single_greedy"] == 0.5
    stored = sqlrun.run(
        ws,
        "SELECT protocol, count(*) AS n, avg(attempt_reward) AS acc FROM trajectories "
        "GROUP BY protocol ORDER BY protocol",
    ).to_dict("records")
    assert stored == [{"protocol": "single", "n": 6, "acc": 0.5}, {"protocol": "single_greedy", "n": 2, "acc": 0.5}]


def test_training_evaluates_the_greedy_protocol_on_the_synthetic_task_by_default():
    assert load_config("micro").generation.eval_greedy is None
    assert greedy_evaluated(None, "synthetic") and not greedy_evaluated(None, "gsm8k")
    assert greedy_evaluated(True, "gsm8k") and not greedy_evaluated(False, "synthetic")
    base = FeedbackSource.CRITIC_BASE
    assert training_protocols("synthetic", base, greedy=True) == ("single", "single_greedy", "feedback", "gated")
    assert training_protocols("synthetic", base) == ("single", "feedback", "gated")
