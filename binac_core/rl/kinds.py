"""The kinds the pipeline dispatches on, as enums whose values are identifiers: feedback sources, critic-reward forms,
phases and evaluation protocols. Where a second turn's feedback comes from is a `FeedbackSource`, how a feedback is
rewarded a `CriticRewardForm`, which level trains at an iteration a `Phase`, and a held-out evaluation protocol an
`EvalProtocol`; an adapter's role, on the model's floor, is `binac_core.model.stage_io.AdapterRole`. The values are what
is stored (MLflow tags and params, evaluation files, the trajectory `protocol` column, shard names); what a report shows
of a feedback source is its label (`FEEDBACK_SOURCE_LABELS`), so a label can be reworded without touching stored data. A
stored source is read back with `FeedbackSource.parse`, which also reads the labels some stored runs hold as their
source (`STORED_LABELS`).

This module is the one place that compares a kind with its string (tests/test_kinds.py): elsewhere the code
compares with the members."""

from __future__ import annotations

from binac_core.errors import BinacError
from binac_core.foundation.kind import Kind


class FeedbackSource(Kind):
    """Where a second turn's feedback comes from: the one name for it in specs, stages, evaluations and reports.
    The value is the identifier the `eval_feedback_source` tag and param and the evaluation files hold; reports show
    its `label`."""

    CRITIC_TRAINED = "critic"
    """The method's own critic adapter, trained by it."""
    CRITIC_BASE = "critic_frozen"
    """The initial critic: the base model in the critic role, never trained (fixed_critic; grpo's evaluations)."""
    CRITIC_ADAPTER = "critic_adapter"
    """`binac evaluate --critic-adapter DIR`: an adapter given on the command line (how it was trained is not
    known)."""
    FIXED = "fixed"
    """The self-correction baseline's fixed text (`binac_core.benchmarks.prompts.SELF_CORRECT_FEEDBACK`)."""
    ORACLE = "oracle"
    """The synthetic task's rule-based oracle, which names the first wrong step (it reads the reference)."""

    @property
    def label(self) -> str:
        """What reports show for this source (`FEEDBACK_SOURCE_LABELS`)."""
        return FEEDBACK_SOURCE_LABELS[self]

    @property
    def sampled(self) -> bool:
        """A critic writes it (sampled, counted as generated samples); else it is written text, not sampled."""
        return self in (FeedbackSource.CRITIC_TRAINED, FeedbackSource.CRITIC_BASE, FeedbackSource.CRITIC_ADAPTER)

    @classmethod
    def parse(cls, text: str) -> FeedbackSource:
        """The source a stored `text` names: an identifier, or one of `STORED_LABELS`; anything else is refused in
        one line naming the identifiers."""
        if text in STORED_LABELS:
            return STORED_LABELS[text]
        try:
            return cls(text)
        except ValueError:
            known = ", ".join(s.value for s in cls)
            raise BinacError(f"unknown feedback source {text!r} (known: {known})") from None


FEEDBACK_SOURCE_LABELS = {
    FeedbackSource.CRITIC_TRAINED: "critic (trained)",
    FeedbackSource.CRITIC_BASE: "critic (base, frozen)",
    FeedbackSource.CRITIC_ADAPTER: "critic (adapter)",
    FeedbackSource.FIXED: "fixed instruction",
    FeedbackSource.ORACLE: "oracle (rule-based)",
}
"""Each source's label, the one text every report shows for it."""

STORED_LABELS = {
    "critic (trained)": FeedbackSource.CRITIC_TRAINED,
    "critic (base, frozen)": FeedbackSource.CRITIC_BASE,
    "critic (adapter)": FeedbackSource.CRITIC_ADAPTER,
    "fixed instruction": FeedbackSource.FIXED,
    "oracle (rule-based)": FeedbackSource.ORACLE,
}
"""The labels stored runs may hold as their feedback source (in the `eval_feedback_source` tag and param and the
evaluation files' `feedback_source`; studies/archive's runs do), as the sources they name. Fixed: they are stored
texts, whatever `FEEDBACK_SOURCE_LABELS` shows."""


class Phase(Kind):
    """Which level trains at an iteration (`train.alternation`, binac_core/rl/schedule.py)."""

    BOTH = "both"
    """No alternation: the actor and the critic train at every iteration (the critic still by `critic_every`)."""
    ACTOR = "actor"
    """The actor trains, the critic is frozen."""
    CRITIC = "critic"
    """The critic trains, the actor is frozen (its look-ahead update is computed and discarded)."""


class CriticRewardForm(Kind):
    """How a feedback z is rewarded (`MethodSpec.critic_reward`; `binac_core.rl.critic_reward.critic_reward`). The
    value is the identifier specs and the critic-reward stage are given."""

    R1 = "r1"
    """r1(z; θ): the reward of the actor's refinement given z (λ = 0, no look-ahead needed)."""
    PENALTY = "penalty"
    """The first-order value-penalty form of r1(z; θ) and r1(z; θ⁺) (`losses.penalty_reward`); without a
    look-ahead actor (θ⁺ = θ) it is r1."""
    AFTER = "after"
    """r1(z; θ⁺) alone: the reward of the refinement by the actor after its update (needs the look-ahead)."""


class EvalProtocol(Kind):
    """A held-out evaluation protocol (binac_core/rl/evaluation.py describes each). The value is the name stored in
    the trajectory `protocol` column, in shard names (`eval-<protocol>`) and in the metrics (`acc_<protocol>`)."""

    SINGLE = "single"
    SINGLE_GREEDY = "single_greedy"
    FEEDBACK = "feedback"
    GATED = "gated"
    FEEDBACK_EXEC = "feedback_exec"
    GATED_EXEC = "gated_exec"
    FEEDBACK_FROZEN = "feedback_frozen"
    BANK = "bank"
    """The critic's fixed attempt bank, scored by the method's critic (binac_core/rl/bank.py)."""
    BANK_FROZEN = "bank_frozen"
    """The same bank scored by the frozen base critic."""
