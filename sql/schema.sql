-- The trajectory schema: one row per generated sample (a first attempt, with its feedback and refinement when
-- the method has them). Training writes these rows as Parquet shards, one file per (run, protocol, step),
-- replaced atomically, so a re-run or a resumed run never duplicates or loses rows; `trajectories.duckdb`
-- holds the view `trajectories` over all shards (see binac_core/store/storage.py).
CREATE TABLE trajectory_rows (
    run_id          VARCHAR NOT NULL,  -- MLflow run id of the training/evaluation run
    method          VARCHAR NOT NULL,  -- grpo | fixed_critic | binac | binac_lam0 | binac_after | critic_only |
                                       -- self_correct | oracle_critic | binac_disc | eval
    preset          VARCHAR NOT NULL,  -- config preset name
    seed            INTEGER NOT NULL,  -- run seed
    step            INTEGER NOT NULL,  -- training iteration (eval rows: the iteration evaluated after)
    split           VARCHAR NOT NULL,  -- train | eval; the critic's attempt bank: bank_val | bank_eval
    protocol        VARCHAR NOT NULL,  -- train rows: train; eval rows: single | feedback | gated | feedback_exec | gated_exec; bank rows: bank | bank_frozen (no refinement)
    benchmark       VARCHAR NOT NULL,  -- synthetic | math500 | mbpp | gpqa_diamond | gsm8k ...
    problem_id      VARCHAR NOT NULL,  -- the problem's id in its split
    sample_idx      INTEGER NOT NULL,  -- index of the first attempt within its group
    feedback_idx    INTEGER NOT NULL,  -- index of the feedback within the attempt's critic group (0 if none)
    round           INTEGER NOT NULL,  -- feedback round (gated protocol: 1..K; otherwise 1 or 0 without feedback)
    prompt          VARCHAR NOT NULL,  -- the actor's first-turn prompt (rendered text)
    attempt         VARCHAR NOT NULL,  -- the first attempt y0
    attempt_reward  DOUBLE NOT NULL,   -- verifier reward r0 of the attempt
    feedback        VARCHAR,           -- critic feedback z (NULL for methods without feedback)
    refined         VARCHAR,           -- refined answer y1 given (x, y0, z)
    refined_reward  DOUBLE,            -- verifier reward r1 of the refinement
    critic_reward   DOUBLE,            -- the feedback's reward, training rows of methods with a second turn: binac
                                       -- (1+μ)·r1(θ) − μ·r1(θ⁺), μ = λ(1+α); binac_after r1(θ⁺); the others r1(θ)
    attempt_tokens  INTEGER NOT NULL,  -- completion tokens of the attempt
    feedback_tokens INTEGER,           -- completion tokens of the feedback
    refined_tokens  INTEGER,           -- completion tokens of the refinement
    created_at      TIMESTAMP NOT NULL, -- when the step's rows were generated
    first_wrong_step INTEGER,          -- synthetic task: the attempt's first wrong step by the oracle (NULL: none)
    feedback_step   INTEGER,           -- synthetic task: the step the feedback names as wrong (NULL: names none)
    actor_samples   BIGINT,            -- training runs: the run's cumulative actor TRAINING samples after `step`
                                       -- (sequences the actor's loss was computed on; never look-ahead
                                       -- refinements); eval rows: at the evaluation's step, 0 at step 0. NULL for
                                       -- `binac evaluate` and in rows of a shard without this column
    generated_samples BIGINT,          -- the same, counting every sequence sampled from the actor or the critic
                                       -- (attempts, critic feedback, refinements, look-ahead refinements)
    feedback_approves BOOLEAN,         -- synthetic task: the feedback approves the attempt ("Looks correct."); NULL
                                       -- without feedback, on other benchmarks, and in rows of a shard without
                                       -- this column
    parent_run_id   VARCHAR,           -- MLflow run id of the comparison or study (the parent run) this run belongs
                                       -- to; NULL for a standalone `binac train` / `binac evaluate` (and in rows
                                       -- of a shard without this column)
    feedback_verdict VARCHAR,          -- the feedback's verdict on the attempt: correct | incorrect | none (none: no
                                       -- verdict, or a contradictory one; binac_core/benchmarks/verdict.py). NULL without
                                       -- feedback, for a fixed instruction (no critic wrote it), and in rows of a
                                       -- shard without this column
    variant         VARCHAR            -- the run's variant label among runs of the same method (a study arm's
                                       -- `label`, e.g. chosen | reference; the MLflow tag `variant`); NULL for a run
                                       -- without one, and in rows of a shard without this column
);
