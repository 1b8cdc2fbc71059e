-- Question: how did each method do? A per-method summary computed from the stored trajectories that equals the
-- numbers MLflow holds (column names are the MLflow metric names): for every training run, its metrics at its
-- last training step and at its last evaluation, then the mean over the method's runs (seeds), as the compare
-- report does (the report shows the eval columns in %).
--
-- How each MLflow metric follows from the rows (tasks/store.py, binac_core/evaluation.py):
--   train/reward_first     mean attempt_reward of the step's train rows, one per attempt (feedback_idx = 0)
--   train/reward_refined   mean refined_reward of the step's train rows (one per attempt x feedback)
--   train/feedback_gain    mean refined_reward - attempt_reward of those rows
--   train/critic_reward    mean critic_reward of those rows
--   eval/acc_single        mean attempt_reward of the eval rows of protocol single
--   eval/acc_feedback      mean refined_reward of the eval rows of protocol feedback
--   eval/acc_gated_k<K>    share of eval samples (problem_id, sample_idx) solved single-turn or in any gated
--                          round (refined_reward > 0); K = the config's gated_k (gated_rounds <= K: rounds used)
-- NULL where a method has no such rows (grpo has no feedback). eval/acc_single at step 0 (before training) is
-- `eval/acc_single_start`. A run that is still training is summarised as it stands.
--
-- Parameters:
-- @param preset = %
--   a LIKE pattern on the preset
-- @param method = %
--   a LIKE pattern on the method
-- @param per_run = 0
--   1: one row per training run instead of one per method
CREATE OR REPLACE TEMP TABLE rows AS
SELECT * FROM trajectories WHERE preset LIKE $preset AND method LIKE $method AND method <> 'eval';

CREATE OR REPLACE TEMP TABLE last_steps AS
SELECT run_id, any_value(method) AS method, any_value(seed) AS seed,
       max(step) FILTER (WHERE split = 'train') AS last_train_step,
       max(step) FILTER (WHERE split = 'eval') AS last_eval_step
FROM rows GROUP BY run_id;

CREATE OR REPLACE TEMP TABLE per_run AS
SELECT l.run_id, l.method, l.seed, l.last_train_step AS iterations, l.last_eval_step,
       t.reward_first, t.reward_refined, t.feedback_gain, t.critic_reward,
       e0.acc_single AS acc_single_start, e.acc_single, f.acc_feedback,
       (e.solved_first + coalesce(g.solved_later, 0)) / e.samples AS acc_gated, g.rounds AS gated_rounds,
       f.n IS NOT NULL AS has_feedback
FROM last_steps l
LEFT JOIN (
    SELECT r.run_id, avg(r.attempt_reward) FILTER (WHERE r.feedback_idx = 0) AS reward_first,
           avg(r.refined_reward) AS reward_refined, avg(r.refined_reward - r.attempt_reward) AS feedback_gain,
           avg(r.critic_reward) AS critic_reward
    FROM rows r JOIN last_steps l ON r.run_id = l.run_id AND r.step = l.last_train_step
    WHERE r.split = 'train' GROUP BY r.run_id
) t ON t.run_id = l.run_id
LEFT JOIN (
    SELECT r.run_id, avg(r.attempt_reward) AS acc_single, count(*) AS samples,
           count(*) FILTER (WHERE r.attempt_reward > 0) AS solved_first
    FROM rows r JOIN last_steps l ON r.run_id = l.run_id AND r.step = l.last_eval_step
    WHERE r.split = 'eval' AND r.protocol = 'single' GROUP BY r.run_id
) e ON e.run_id = l.run_id
LEFT JOIN (
    SELECT run_id, avg(attempt_reward) AS acc_single FROM rows
    WHERE split = 'eval' AND protocol = 'single' AND step = 0 GROUP BY run_id
) e0 ON e0.run_id = l.run_id
LEFT JOIN (
    SELECT r.run_id, avg(r.refined_reward) AS acc_feedback, count(*) AS n
    FROM rows r JOIN last_steps l ON r.run_id = l.run_id AND r.step = l.last_eval_step
    WHERE r.split = 'eval' AND r.protocol = 'feedback' GROUP BY r.run_id
) f ON f.run_id = l.run_id
LEFT JOIN (
    SELECT r.run_id, count(DISTINCT (r.problem_id, r.sample_idx)) FILTER (WHERE r.refined_reward > 0) AS solved_later,
           max(r.round) AS rounds
    FROM rows r JOIN last_steps l ON r.run_id = l.run_id AND r.step = l.last_eval_step
    WHERE r.split = 'eval' AND r.protocol = 'gated' GROUP BY r.run_id
) g ON g.run_id = l.run_id;

SELECT method, CASE WHEN $per_run = 1 THEN any_value(run_id) END AS run_id, count(*) AS runs,
       list(seed ORDER BY seed) AS seeds, avg(iterations) AS iterations,
       avg(reward_first) AS "train/reward_first", avg(reward_refined) AS "train/reward_refined",
       avg(feedback_gain) AS "train/feedback_gain", avg(critic_reward) AS "train/critic_reward",
       avg(acc_single_start) AS "eval/acc_single_start", avg(acc_single) AS "eval/acc_single",
       avg(acc_feedback) AS "eval/acc_feedback",
       avg(CASE WHEN has_feedback THEN acc_gated END) AS "eval/acc_gated", max(gated_rounds) AS gated_rounds
FROM per_run
GROUP BY method, CASE WHEN $per_run = 1 THEN run_id END
ORDER BY method, run_id;
