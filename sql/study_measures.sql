-- Question: per run and iteration of one study or comparison (the latest by default), the study's measures of
-- advantage collapse and of the critic, computed from the stored rows; they equal the MLflow metrics of the same
-- names (tasks/store.py, binac_core/measures.py):
--   train/zero_adv_frac            share of problems whose first attempts all have the same reward (every GRPO
--                                  advantage of the group is 0)
--   train/critic_signal_frac       share of first attempts whose K feedbacks' critic rewards are not all equal
--   train/critic_hits_first_error  on wrong attempts with a wrong step, share of feedbacks naming exactly the
--                                  first wrong step (columns first_wrong_step, feedback_step: synthetic task only)
--   train/critic_false_alarm       on right attempts, share of feedbacks naming any step as wrong
--   train/feedback_gain            mean refined_reward - attempt_reward
-- (train/refine_zero_adv_frac needs the actor's shaping weight α, a config value: it is in MLflow only.)
-- With split = 'eval' the same columns describe the held-out `feedback` protocol (eval/critic_* in MLflow).
--
-- Parameters:
-- @param comparison = latest
--   which runs: the MLflow parent run id of a comparison or study (a unique prefix will do), `latest` (the
--   comparison whose runs started most recently: the parent run whose earliest row is newest), or `all` (every
--   run in the store, standalone `binac train` runs included). `binac sql` resolves `latest` to the parent run id
--   and prints it in its header line; in a store without parent run ids, `latest` means `all`.
-- @param method = %
--   a LIKE pattern on the method (binac, binac_lam0, binac_after, fixed_critic, ...)
-- @param split = train
--   train: the training iterations; eval: held-out evaluations (protocol feedback)
CREATE OR REPLACE TEMP TABLE rows AS
SELECT * FROM trajectories
WHERE method LIKE $method AND split = $split AND protocol IN ('train', 'feedback', 'single')
  AND ($comparison = 'all' OR parent_run_id = $comparison);

CREATE OR REPLACE TEMP TABLE attempts AS  -- one row per first attempt (a feedback method stores K per attempt)
SELECT run_id, step, protocol, problem_id, sample_idx, any_value(attempt_reward) AS r0,
       CASE WHEN count(critic_reward) > 0 THEN count(DISTINCT critic_reward) > 1 END AS critic_signal
FROM rows GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE groups AS
SELECT run_id, step, protocol, problem_id, count(DISTINCT r0) = 1 AS collapsed FROM attempts GROUP BY ALL;

SELECT $comparison AS comparison, r.run_id, any_value(r.method) AS method, any_value(r.preset) AS preset,
       any_value(r.seed) AS seed, r.step,
       (SELECT avg(collapsed::INT) FROM groups g
        WHERE g.run_id = r.run_id AND g.step = r.step AND g.protocol = 'train') AS zero_adv_frac,
       (SELECT avg(critic_signal::INT) FROM attempts a
        WHERE a.run_id = r.run_id AND a.step = r.step AND a.protocol = 'train') AS critic_signal_frac,
       avg((r.feedback_step IS NOT DISTINCT FROM r.first_wrong_step)::INT)
           FILTER (WHERE r.feedback IS NOT NULL AND r.attempt_reward = 0 AND r.first_wrong_step IS NOT NULL)
           AS critic_hits_first_error,
       avg((r.feedback_step IS NOT NULL)::INT) FILTER (WHERE r.feedback IS NOT NULL AND r.attempt_reward > 0)
           AS critic_false_alarm,
       avg(r.refined_reward - r.attempt_reward) FILTER (WHERE r.feedback IS NOT NULL) AS feedback_gain
FROM rows r
GROUP BY r.run_id, r.step
ORDER BY method, seed, r.step;
