-- Question: which feedback most improved the actor's answer, per method, in one comparison (the latest by
-- default: a method's feedback and gains belong to that comparison's preset and budget; `all` pools every run)?
-- For each method, the k feedback texts with the largest mean gain in reward from the first attempt to the
-- refinement written after that feedback (gain = refined_reward - attempt_reward: +1 fixed a wrong attempt, -1
-- broke a right one, 0 no change).
--
-- Rows with the same method and the same feedback text (trimmed) are pooled: `uses` counts them and the rewards
-- are their means (the fixed self-correction text is one text used many times; sampled critic feedback is
-- usually unique). Ties are broken by more uses, then by the text. Methods without training feedback (grpo) have
-- no train rows (their eval rows hold the feedback protocols' feedback).
--
-- Parameters:
-- @param comparison = latest
--   which runs: the MLflow parent run id of a comparison or study (a unique prefix will do), `latest` (the
--   comparison whose runs started most recently: the parent run whose earliest row is newest), or `all` (every
--   run in the store, standalone `binac train` runs included). `binac sql` resolves `latest` to the parent run id
--   and prints it in its header line; in a store without parent run ids, `latest` means `all`.
-- @param split = train
--   train (feedback sampled during training) or eval (feedback of the held-out protocols)
-- @param k = 5
--   how many feedback texts per method
-- @param min_uses = 1
--   only texts used at least this often
CREATE OR REPLACE TEMP TABLE pooled AS
SELECT method, trim(feedback) AS feedback, count(*) AS uses,
       avg(refined_reward - attempt_reward) AS mean_gain,
       avg(attempt_reward) AS mean_attempt_reward, avg(refined_reward) AS mean_refined_reward,
       count(*) FILTER (WHERE attempt_reward = 0 AND refined_reward > 0) AS fixed,
       count(*) FILTER (WHERE attempt_reward > 0 AND refined_reward = 0) AS broke,
       min(step) AS first_step, max(step) AS last_step
FROM trajectories
WHERE feedback IS NOT NULL AND refined_reward IS NOT NULL AND split = $split
  AND ($comparison = 'all' OR parent_run_id = $comparison)
GROUP BY method, trim(feedback)
HAVING count(*) >= $min_uses;

SELECT $comparison AS comparison, method,
       row_number() OVER (PARTITION BY method ORDER BY mean_gain DESC, uses DESC, feedback) AS rank,
       round(mean_gain, 4) AS mean_gain, uses, fixed, broke, round(mean_attempt_reward, 4) AS mean_attempt_reward,
       round(mean_refined_reward, 4) AS mean_refined_reward, first_step, last_step, feedback
FROM pooled
QUALIFY rank <= $k
ORDER BY method, rank;
