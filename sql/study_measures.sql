-- Question: per run and iteration of one study or comparison (the latest by default), the study's measures of
-- advantage collapse and of the critic, recomputed from the stored rows by this file's own SQL; each column equals
-- the MLflow metric train/<column> (tasks/store.py). The definitions are stated in one place, the docstring of
-- binac_core/reports/measures.py; in short:
--   actor_samples, generated_samples  the run's cumulative counts after the step on the two budget axes
--                             (binac_core/rl/methods.py; train/actor_samples, train/generated_samples)
--   zero_adv_frac             share of problems whose G first attempts all have the same reward
--   refine_zero_adv_frac      share of problems whose G refinements of feedback_idx 0 all have the same unshaped
--                             r1 (refined_reward): GRPO's group size, for the second turn
--   critic_hits_first_error   over feedback on attempts with a first wrong step (whatever their answer), the
--                             share naming exactly that step
--   critic_false_alarm        over feedback on attempts whose every step is right, the share naming a step
--   critic_approves_wrong     over feedback on attempts with a first wrong step, the share approving them
--   critic_approves_right     over feedback on attempts whose first answer is right (attempt_reward > 0), the
--                             share approving them (a lucky right answer over a wrong step counts here too)
--   critic_signal             over pairs (useful i, useless j) of one attempt's feedbacks, the mean of
--                             sign(critic_reward_i - critic_reward_j); useful: names the first wrong step of an
--                             attempt with one, or gives the oracle's verdict otherwise (binac_core/reports/measures.py)
--   critic_useful_mixed_frac  share of attempts whose feedbacks hold both a useful and a useless one
--   critic_signal_frac        share of attempts whose K feedbacks' critic rewards are not all equal (noise raises
--                             it: not a measure of signal)
--   feedback_gain             mean refined_reward - attempt_reward
-- The critic measures need the synthetic task's analysis columns (first_wrong_step, feedback_step,
-- feedback_approves); rows stored before feedback_approves existed still give zero_adv_frac,
-- refine_zero_adv_frac, critic_hits_first_error, critic_false_alarm (synthetic rows), critic_signal_frac and
-- feedback_gain, and NULL for the other four.
-- With split = 'eval' the critic_hits_first_error, critic_false_alarm, critic_approves_wrong,
-- critic_approves_right and feedback_gain
-- columns describe the held-out `feedback` protocol (eval/<column> in MLflow), or with
-- eval_protocol = feedback_frozen the frozen base critic on the same attempts (eval/frozen_<column>); the other
-- columns are NULL.
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
-- @param eval_protocol = feedback
--   with split = eval: feedback (the method's own feedback source) or feedback_frozen (the frozen base critic)
CREATE OR REPLACE TEMP TABLE rows AS  -- `analysed`: a feedback row with the first-error analysis (synthetic)
SELECT *,
       feedback IS NOT NULL AND (feedback_approves IS NOT NULL OR benchmark = 'synthetic') AS analysed,
       CASE WHEN feedback_approves IS NULL THEN NULL  -- the feedback's oracle usefulness (binac_core/reports/measures.py)
            WHEN first_wrong_step IS NOT NULL THEN (feedback_step IS NOT DISTINCT FROM first_wrong_step)::INT
            WHEN attempt_reward > 0 THEN feedback_approves::INT
            ELSE (NOT feedback_approves AND feedback_step IS NULL)::INT END AS useful
FROM trajectories
WHERE method LIKE $method AND split = $split AND protocol IN ('train', $eval_protocol, 'single')
  AND ($comparison = 'all' OR parent_run_id = $comparison);

CREATE OR REPLACE TEMP TABLE attempts AS  -- one row per first attempt (a feedback method stores K per attempt)
SELECT run_id, step, protocol, problem_id, sample_idx, any_value(attempt_reward) AS r0,
       CASE WHEN count(critic_reward) > 0 THEN count(DISTINCT critic_reward) > 1 END AS rewards_differ,
       CASE WHEN count(useful) > 0 THEN count(DISTINCT useful) = 2 END AS mixed
FROM rows GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE train_measures AS  -- the measures only training rows have, per run and step
WITH first_groups AS (  -- a problem's G first attempts
    SELECT run_id, step, problem_id, count(DISTINCT r0) = 1 AS collapsed
    FROM attempts WHERE protocol = 'train' GROUP BY ALL),
refine_groups AS (  -- a problem's G refinements of feedback_idx 0
    SELECT run_id, step, problem_id, count(DISTINCT refined_reward) = 1 AS collapsed
    FROM rows WHERE protocol = 'train' AND feedback IS NOT NULL AND feedback_idx = 0 GROUP BY ALL),
pairs AS (  -- (useful i, useless j) feedbacks of one attempt
    SELECT run_id, step, i.critic_reward AS ci, j.critic_reward AS cj
    FROM rows i JOIN rows j USING (run_id, step, protocol, problem_id, sample_idx)
    WHERE protocol = 'train' AND i.useful = 1 AND j.useful = 0)
SELECT * FROM (SELECT DISTINCT run_id, step FROM rows)
LEFT JOIN (SELECT run_id, step, avg(collapsed::INT) AS zero_adv_frac FROM first_groups GROUP BY ALL)
    USING (run_id, step)
LEFT JOIN (SELECT run_id, step, avg(collapsed::INT) AS refine_zero_adv_frac FROM refine_groups GROUP BY ALL)
    USING (run_id, step)
LEFT JOIN (SELECT run_id, step, avg(rewards_differ::INT) AS critic_signal_frac,
                  avg(mixed::INT) AS critic_useful_mixed_frac
           FROM attempts WHERE protocol = 'train' GROUP BY ALL)
    USING (run_id, step)
LEFT JOIN (SELECT run_id, step,
                  CASE WHEN count(ci) = count(*) AND count(cj) = count(*)  -- every pair has critic rewards
                       THEN avg((ci > cj)::INT - (ci < cj)::INT) END AS critic_signal
           FROM pairs GROUP BY ALL)
    USING (run_id, step);

SELECT $comparison AS comparison, r.run_id, any_value(r.method) AS method, any_value(r.preset) AS preset,
       any_value(r.seed) AS seed, r.step,
       max(r.actor_samples) AS actor_samples, max(r.generated_samples) AS generated_samples,
       any_value(t.zero_adv_frac) AS zero_adv_frac,
       any_value(t.refine_zero_adv_frac) AS refine_zero_adv_frac,
       avg((r.feedback_step IS NOT DISTINCT FROM r.first_wrong_step)::INT)
           FILTER (WHERE r.feedback IS NOT NULL AND r.first_wrong_step IS NOT NULL) AS critic_hits_first_error,
       avg((r.feedback_step IS NOT NULL)::INT) FILTER (WHERE r.analysed AND r.first_wrong_step IS NULL)
           AS critic_false_alarm,
       avg(r.feedback_approves::INT)
           FILTER (WHERE r.feedback IS NOT NULL AND r.first_wrong_step IS NOT NULL AND r.feedback_approves IS NOT NULL)
           AS critic_approves_wrong,
       avg(r.feedback_approves::INT)
           FILTER (WHERE r.feedback IS NOT NULL AND r.attempt_reward > 0 AND r.feedback_approves IS NOT NULL)
           AS critic_approves_right,
       any_value(t.critic_signal) AS critic_signal,
       any_value(t.critic_useful_mixed_frac) AS critic_useful_mixed_frac,
       any_value(t.critic_signal_frac) AS critic_signal_frac,
       avg(r.refined_reward - r.attempt_reward) FILTER (WHERE r.feedback IS NOT NULL) AS feedback_gain
FROM rows r JOIN train_measures t USING (run_id, step)
GROUP BY r.run_id, r.step
ORDER BY method, seed, r.step;
