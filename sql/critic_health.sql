-- Question: does the critic tell right attempts from wrong ones, does it learn to approve everything, and does its
-- verdict come with a fix? Per method and step of one comparison or study (the latest by default), the critic
-- health measures recomputed from the stored rows (the feedback_verdict column); each column equals the MLflow
-- metric <split>/critic/<column> of one run (averaged here over the method's runs, one row per seed with
-- per_run = 1). The definitions are stated once, in the docstring of binac_core/reports/measures.py; in short, against
-- the verifier on the first attempt (right: attempt_reward > 0):
--   feedbacks            rows with a verdict (a fixed instruction has none: self_correct does not appear)
--   verdict_accuracy     share of feedbacks whose verdict (correct | incorrect) is the verifier's; none is wrong
--   balanced_accuracy    (share of wrong attempts called incorrect + share of right attempts called correct) / 2;
--                        0.5 is chance, 1 the verifier
--   approves_wrong       over wrong first attempts, the share called correct (flattery)
--   flags_right          over right first attempts, the share called incorrect
--   verdict_missing      share with verdict none (no verdict line, or a contradictory one)
--   gain_when_flagged    mean refined_reward - attempt_reward over feedbacks calling the attempt incorrect
--   gain_when_approved   the same over feedbacks calling it correct
-- Rows stored before feedback_verdict existed have NULL there and do not appear.
--
-- Parameters:
-- @param comparison = latest
--   which runs: the MLflow parent run id of a comparison or study (a unique prefix will do), `latest` (the
--   comparison whose runs started most recently), or `all` (every run in the store, `binac train` and
--   `binac evaluate` runs included). `binac sql` resolves `latest` and prints it in its header line.
-- @param method = %
--   a LIKE pattern on the method (binac, binac_disc, fixed_critic, eval, ...)
-- @param split = train
--   train: the training iterations; eval: held-out evaluations
-- @param eval_protocol = feedback
--   with split = eval: feedback (the method's own feedback source), feedback_frozen (the frozen base critic on
--   the same attempts) or feedback_exec (code: the critic shown the execution result)
-- @param per_run = 0
--   1: one row per run and step (with its run_id and seed) instead of the mean over the method's runs
WITH per_run AS (
    SELECT run_id, any_value(method) AS method, any_value(preset) AS preset, any_value(benchmark) AS benchmark,
           any_value(seed) AS seed, step, max(actor_samples) AS actor_samples, count(*) AS feedbacks,
           avg((feedback_verdict = CASE WHEN attempt_reward > 0 THEN 'correct' ELSE 'incorrect' END)::INT)
               AS verdict_accuracy,
           (avg((feedback_verdict = 'incorrect')::INT) FILTER (WHERE attempt_reward <= 0)
            + avg((feedback_verdict = 'correct')::INT) FILTER (WHERE attempt_reward > 0)) / 2 AS balanced_accuracy,
           avg((feedback_verdict = 'correct')::INT) FILTER (WHERE attempt_reward <= 0) AS approves_wrong,
           avg((feedback_verdict = 'incorrect')::INT) FILTER (WHERE attempt_reward > 0) AS flags_right,
           avg((feedback_verdict = 'none')::INT) AS verdict_missing,
           avg(refined_reward - attempt_reward) FILTER (WHERE feedback_verdict = 'incorrect') AS gain_when_flagged,
           avg(refined_reward - attempt_reward) FILTER (WHERE feedback_verdict = 'correct') AS gain_when_approved
    FROM trajectories
    WHERE feedback_verdict IS NOT NULL AND method LIKE $method AND split = $split
      AND protocol = CASE WHEN $split = 'train' THEN 'train' ELSE $eval_protocol END
      AND ($comparison = 'all' OR parent_run_id = $comparison)
    GROUP BY run_id, step
)
SELECT $comparison AS comparison, method, any_value(preset) AS preset, any_value(benchmark) AS benchmark,
       CASE WHEN $per_run = 1 THEN any_value(run_id) END AS run_id,
       CASE WHEN $per_run = 1 THEN any_value(seed) END AS seed, count(DISTINCT run_id) AS runs, step,
       avg(actor_samples) AS actor_samples, sum(feedbacks) AS feedbacks,
       avg(verdict_accuracy) AS verdict_accuracy, avg(balanced_accuracy) AS balanced_accuracy,
       avg(approves_wrong) AS approves_wrong, avg(flags_right) AS flags_right,
       avg(verdict_missing) AS verdict_missing, avg(gain_when_flagged) AS gain_when_flagged,
       avg(gain_when_approved) AS gain_when_approved
FROM per_run
GROUP BY method, step, CASE WHEN $per_run = 1 THEN run_id END
ORDER BY method, step, seed;
