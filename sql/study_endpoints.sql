-- Question: per run of one study (the latest by default), the third edition's endpoints
-- (studies/sparse-feedback-v3.design.md), recomputed from the stored held-out rows by this file's own SQL; each
-- equals what the study report reads from MLflow (binac_core/studies/hypotheses_v3.py, run_values.area). A run is
-- named by its method, variant label (a study arm's; NULL: none), seed and run id:
--   difficulty                the run's task difficulty: the operations in its prompts (synthetic task)
--   last_step                 the run's last evaluation
--   acc_single_0, _last       held-out single-turn accuracy (pass@1: the mean reward of the `single` rows) at
--                             step 0 and at the last evaluation
--   acc_single_area           its area over the evaluations at step 0, every $eval_every iterations and the last
--                             (the trapezoid rule divided by the last step: a mean accuracy); a run's extra
--                             equal-budget evaluations do not enter
--   acc_single_greedy_area, acc_feedback_area, acc_feedback_frozen_area
--                             the same over the `single_greedy`, `feedback` (the method's own feedback source) and
--                             `feedback_frozen` (the frozen base critic on the same attempts) rows
--   hits_last, frozen_hits_last
--                             critic_hits_first_error at the last evaluation, of the method's own critic and of the
--                             frozen base critic on the same attempts (H3)
--   wrong_steps_last          their denominator: the held-out first attempts with a wrong step at the last
--                             evaluation (an actor near 100 % leaves few; hits_last is a share of these)
--   hits_0                    the method's own critic's at step 0
--   approves_wrong_0, _last / approves_right_0, _last
--                             critic_approves_wrong / critic_approves_right of the method's own critic (H6)
--   balanced_accuracy_last    the verdict's balanced accuracy at the last evaluation (H8): (share of wrong first
--                             attempts called `incorrect` + share of right ones called `correct`) / 2
-- The definitions are those of binac_core/reports/measures.py. An area is NULL when an evaluation of its grid is
-- missing (a run stopped early).
--
-- Parameters:
-- @param comparison = latest
--   which runs: the MLflow parent run id of a study (a unique prefix will do), `latest` (the study whose runs
--   started most recently), or `all` (every run in the store)
-- @param method = %
--   a LIKE pattern on the method
-- @param eval_every = 10
--   the study's evaluation interval (its study file's `eval_every`): the grid of the areas
CREATE OR REPLACE TEMP TABLE held_out AS
SELECT run_id, method, variant, seed, step, protocol, attempt_reward, refined_reward, first_wrong_step, feedback_step,
       feedback_approves, feedback_verdict,
       length(prompt) - length(replace(replace(prompt, '+', ''), '-', '')) AS operations
FROM trajectories
WHERE split = 'eval' AND method LIKE $method AND ($comparison = 'all' OR parent_run_id = $comparison);

CREATE OR REPLACE TEMP TABLE last_steps AS
SELECT run_id, max(step) AS last_step, max(operations) AS difficulty FROM held_out GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE accuracy AS  -- one accuracy per run, protocol and evaluation on the areas' grid
SELECT h.run_id, h.protocol, h.step,
       avg(CASE WHEN h.protocol IN ('single', 'single_greedy') THEN h.attempt_reward ELSE h.refined_reward END) AS acc
FROM held_out h JOIN last_steps USING (run_id)
WHERE h.protocol IN ('single', 'single_greedy', 'feedback', 'feedback_frozen')
  AND (h.step % $eval_every = 0 OR h.step = last_step)
GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE areas AS  -- trapezoids between consecutive evaluations, over the last step
WITH ordered AS (
    SELECT *, lag(step) OVER w AS prev_step, lag(acc) OVER w AS prev_acc
    FROM accuracy WINDOW w AS (PARTITION BY run_id, protocol ORDER BY step))
SELECT o.run_id, o.protocol,
       CASE WHEN count(*) = (SELECT count(*) FROM range(0, any_value(l.last_step) + 1, $eval_every))
                             + (any_value(l.last_step) % $eval_every <> 0)::INT
            THEN sum(CASE WHEN prev_step IS NULL THEN 0 ELSE (step - prev_step) * (acc + prev_acc) / 2 END)
                 / any_value(l.last_step) END AS area
FROM ordered o JOIN last_steps l USING (run_id)
GROUP BY ALL;

CREATE OR REPLACE TEMP TABLE critic AS  -- the critic measures per run, protocol and step (measures.py)
SELECT run_id, protocol, step,
       avg(CASE WHEN first_wrong_step IS NOT NULL THEN (feedback_step IS NOT DISTINCT FROM first_wrong_step)::INT END)
           AS hits,
       count(first_wrong_step) AS wrong_steps,
       avg(CASE WHEN first_wrong_step IS NOT NULL THEN feedback_approves::INT END) AS approves_wrong,
       avg(CASE WHEN attempt_reward > 0 THEN feedback_approves::INT END) AS approves_right,
       (avg(CASE WHEN attempt_reward <= 0 AND feedback_verdict IS NOT NULL THEN (feedback_verdict = 'incorrect')::INT END)
        + avg(CASE WHEN attempt_reward > 0 AND feedback_verdict IS NOT NULL THEN (feedback_verdict = 'correct')::INT END))
           / 2 AS balanced_accuracy
FROM held_out WHERE protocol IN ('feedback', 'feedback_frozen') GROUP BY ALL;

SELECT $comparison AS comparison, any_value(h.method) AS method, any_value(h.variant) AS variant,
       any_value(h.seed) AS seed, l.difficulty, h.run_id, l.last_step,
       round(100 * any_value(a0.acc), 1) AS acc_single_0, round(100 * any_value(al.acc), 1) AS acc_single_last,
       round(100 * any_value(s.area), 2) AS acc_single_area,
       round(100 * any_value(g.area), 2) AS acc_single_greedy_area,
       round(100 * any_value(f.area), 2) AS acc_feedback_area,
       round(100 * any_value(ff.area), 2) AS acc_feedback_frozen_area,
       round(100 * any_value(c0.hits), 1) AS hits_0, round(100 * any_value(cl.hits), 1) AS hits_last,
       round(100 * any_value(fl.hits), 1) AS frozen_hits_last, any_value(cl.wrong_steps) AS wrong_steps_last,
       round(100 * any_value(c0.approves_wrong), 1) AS approves_wrong_0,
       round(100 * any_value(cl.approves_wrong), 1) AS approves_wrong_last,
       round(100 * any_value(c0.approves_right), 1) AS approves_right_0,
       round(100 * any_value(cl.approves_right), 1) AS approves_right_last,
       round(100 * any_value(cl.balanced_accuracy), 1) AS balanced_accuracy_last
FROM held_out h JOIN last_steps l USING (run_id)
LEFT JOIN accuracy a0 ON a0.run_id = h.run_id AND a0.protocol = 'single' AND a0.step = 0
LEFT JOIN accuracy al ON al.run_id = h.run_id AND al.protocol = 'single' AND al.step = l.last_step
LEFT JOIN areas s ON s.run_id = h.run_id AND s.protocol = 'single'
LEFT JOIN areas g ON g.run_id = h.run_id AND g.protocol = 'single_greedy'
LEFT JOIN areas f ON f.run_id = h.run_id AND f.protocol = 'feedback'
LEFT JOIN areas ff ON ff.run_id = h.run_id AND ff.protocol = 'feedback_frozen'
LEFT JOIN critic c0 ON c0.run_id = h.run_id AND c0.protocol = 'feedback' AND c0.step = 0
LEFT JOIN critic cl ON cl.run_id = h.run_id AND cl.protocol = 'feedback' AND cl.step = l.last_step
LEFT JOIN critic fl ON fl.run_id = h.run_id AND fl.protocol = 'feedback_frozen' AND fl.step = l.last_step
GROUP BY h.run_id, l.difficulty, l.last_step
ORDER BY l.difficulty, method, variant NULLS FIRST, seed;
