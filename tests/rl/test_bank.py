"""The critic's fixed attempt bank (binac_core/rl/bank.py), unit level: filling a split to exact sizes by hand,
the refusal of a bank that cannot be filled, its problems (held out, split by problem, deterministic), its key,
a bank built and scored on a scripted backend, and a stored bank reused, not sampled again (tasks/bank.py)."""

from __future__ import annotations

import hashlib

import pytest

from binac_core.benchmarks import synthetic as syn
from binac_core.errors import BinacError
from binac_core.foundation.config import load_config
from binac_core.model.generation import Generation
from binac_core.model.stage_io import Attempt
from binac_core.rl import bank as banks
from binac_core.rl.kinds import FeedbackSource

MICRO = ("bank.enabled", True), ("bank.right", 3), ("bank.wrong", 4), ("bank.batch_problems", 5)


def _micro(**more):
    return load_config("micro", dict(MICRO) | more)


def _scripted_draw(rewards: list[float]):
    """A draw over a fixed list of rewards: problem i is `p<i>`, its one attempt rewarded `rewards[i]`."""

    def draw(offset: int, n: int):
        ids = range(offset, min(offset + n, len(rewards)))
        rows = [{"id": f"p{i}"} for i in ids]
        attempts = [Attempt(f"p{i}", 0, "", [1], "", [2], [0.0]) for i in ids]
        return rows, attempts, [rewards[i] for i in ids]

    return draw


def test_a_split_keeps_the_first_right_and_wrong_attempts_up_to_exact_sizes():
    # batches of 4: r w w w | w w r w | r r w w ; 2 right and 3 wrong wanted
    rewards = [1, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 0]
    part = banks.fill_split(_scripted_draw(rewards), right=2, wrong=3, batch=4, max_attempts=100)
    # p0 right, p1-p3 wrong (3: full), p4 p5 dropped, p6 right (2: full): done after the second batch
    assert [a.problem_id for a in part.scored.attempts] == ["p0", "p1", "p2", "p3", "p6"]
    assert part.scored.first_rewards == [1, 0, 0, 0, 1]
    assert [r["id"] for r in part.problems] == ["p0", "p1", "p2", "p3", "p6"]
    assert part.sampled == 8


def test_a_split_that_cannot_be_filled_refuses_in_one_line():
    with pytest.raises(BinacError) as err:
        banks.fill_split(_scripted_draw([0] * 50), right=1, wrong=2, batch=4, max_attempts=10, what="bank val")
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("bank val: 10 attempts (bank.max_attempts) left it short of 1 right and 0 wrong")


def test_bank_problems_are_held_out_split_by_problem_and_deterministic():
    task = _micro().task
    held = frozenset(r["question"] for s in ("eval", "val") for r in syn.make_split(task, s))
    val, ev = (syn.bank_rows(task, s, 0, 60, held) for s in ("val", "eval"))
    assert {syn.split_of(r["question"]) for r in val} == {"val"} and {syn.split_of(r["question"]) for r in ev} == {
        "eval"
    }
    questions = [r["question"] for r in val + ev]
    assert len(set(questions)) == 120 and not set(questions) & held
    assert syn.bank_rows(task, "val", 0, 20, held) == val[:20]  # a prefix of a larger draw
    assert syn.bank_rows(task, "val", 1, 20, held) != val[:20]  # the seed moves it
    with pytest.raises(BinacError):
        syn.bank_rows(task, "train", 0, 1)


def test_the_key_names_the_base_the_task_the_bank_and_the_actors_sampling():
    key = banks.bank_key(_micro(), "ab" * 32)
    assert key == banks.bank_key(_micro(**{"bank.enabled": False, "task.n_train": 7}), "ab" * 32)
    for changed in ({"task.difficulty": 3}, {"bank.right": 5}, {"bank.seed": 1}, {"generation.eval_temperature": 0.5}):
        assert banks.bank_key(_micro(**changed), "ab" * 32) != key, changed
    assert banks.bank_key(_micro(), "cd" * 32) != key
    assert banks.frozen_key(_micro(**{"generation.feedback_max_new_tokens": 9}), key) != banks.frozen_key(_micro(), key)


class ScriptedBase:
    """The actor answers right where the question's hash is even, else with a wrong last step; the critic always
    names step 1. Keeps every call's adapter and seed."""

    def __init__(self):
        self.calls: list[tuple[str, object, int]] = []

    def generate(self, prompts, adapter, params):
        role = "critic" if prompts[0][-1]["content"].startswith("Check:") else "actor"
        self.calls.append((role, adapter, params.seed))
        return [Generation(self._answer(role, m[-1]["content"]), [1], [2], [0.0]) for m in prompts]

    @staticmethod
    def _answer(role: str, prompt: str) -> str:
        if role == "critic":
            return "Step 1 is wrong."
        row = syn.make_row(prompt.rsplit("Solve: ", 1)[1])
        if int(hashlib.sha256(row["question"].encode()).hexdigest(), 16) % 2 == 0:
            return row["solution"]
        return row["solution"][:-1] + str((int(row["answer"]) + 1) % 10)


def test_a_bank_built_on_a_scripted_base_has_exact_sizes_per_split_and_is_scored_without_refinements():
    cfg, backend = _micro(), ScriptedBase()
    bank = banks.build_bank(backend, cfg, "ab" * 32)
    assert (bank.key, bank.name) == (banks.bank_key(cfg, "ab" * 32), f"bank-{'ab' * 6}-{bank.key}")
    assert set(bank.splits) == {"val", "eval"}
    for part in bank.splits.values():
        rewards = part.scored.first_rewards
        assert (sum(r > 0 for r in rewards), sum(r <= 0 for r in rewards)) == (3, 4)
        assert len({a.problem_id for a in part.scored.attempts}) == 7  # one attempt per problem
    ids = [{a.problem_id for a in p.scored.attempts} for p in bank.splits.values()]
    assert not ids[0] & ids[1]
    assert {adapter for role, adapter, _ in backend.calls} == {None}  # the base actor, no adapter
    assert banks.Bank.from_json(bank.to_json()) == bank
    backend.calls.clear()
    trained = banks.score_bank(backend, cfg, bank, FeedbackSource.CRITIC_TRAINED, "critic-adapter")
    frozen_seeds = [seed for *_, seed in backend.calls]
    backend.calls.clear()
    banks.score_bank(backend, cfg, bank, FeedbackSource.CRITIC_BASE, None)
    assert [seed for *_, seed in backend.calls] == frozen_seeds  # common random numbers
    for split, scored in trained.items():
        assert (
            len(scored.feedback) == 7 and scored.refined == [] and scored.attempts == bank.splits[split].scored.attempts
        )
    assert banks.scores_from_json(banks.scores_to_json(trained)) == trained


def test_a_stored_bank_is_reused_not_sampled_again(tmp_path, monkeypatch):
    import tasks.bank as stage

    monkeypatch.setenv("BINAC_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("BINAC_MODEL_CACHE", str(tmp_path / "models"))
    cfg, backend, loads = _micro(), ScriptedBase(), []
    monkeypatch.setattr(stage, "loaded", lambda cfg_d, base, seed: loads.append(seed) or (None, backend))
    cfg_d = cfg.model_dump(mode="json")
    first = stage.build_bank.fn(cfg_d, None, "ab" * 32, 0)
    assert loads == [0] and first.path.endswith(f"banks/bank-{'ab' * 6}-{banks.bank_key(cfg, 'ab' * 32)}.json")
    assert stage.build_bank.fn(cfg_d, None, "ab" * 32, 5) == first and loads == [0]
    frozen = stage.frozen_bank.fn(cfg_d, None, first, 0)
    assert stage.frozen_bank.fn(cfg_d, None, first, 0) == frozen and loads == [0, 0]
    assert stage.build_bank.fn(cfg_d, None, "cd" * 32, 0) != first and loads == [0, 0, 0]  # another base
