-- Question: per run, the fourth edition's primary endpoint (studies/sparse-feedback-v4.design.md), recomputed from
-- the stored attempt-bank rows by this file's own SQL; each value equals what the study report reads from MLflow
-- (binac_core/studies/critic_margin.py). A run is named by its method, its variant label (a study arm's, e.g.
-- `chosen`, `reference`; NULL: none, or rows stored before the column), its seed and its run id.
--   critic_margin        the run's critic's discrimination minus the frozen base critic's on the same bank half,
--                        averaged over the window's evaluations; discrimination = hits_first_error − false_alarm
--   hits_margin          the same difference in first-error hits alone (over attempts with a wrong written step,
--                        the share whose feedback names the first one)
--   false_alarm_margin   the same in false alarm (over attempts whose every written step is right, the share
--                        whose feedback names a step anyway)
--   window_evaluations   the evaluations averaged: those at step 0, every $eval_every iterations and the last
--                        ($iterations), from half the iterations on; a run's extra equal-budget evaluations do not
--                        enter. The report gives no value to a run missing one of them; compare this count.
-- The critic is the method's (protocol `bank`), the frozen base critic's rows are protocol `bank_frozen`; the
-- definitions are those of binac_core/reports/measures.py (sql/bank_measures.sql gives every bank measure).
--
-- Parameters:
-- @param comparison = latest
--   which runs: the MLflow parent run id of a study (a unique prefix will do), `latest` (the study whose runs
--   started most recently), or `all` (every run in the store)
-- @param method = %
--   a LIKE pattern on the method (the bank is scored for methods that train a critic)
-- @param split = eval
--   the bank half: the study's evaluation split (`val` for a pilot, `eval` for a main study)
-- @param iterations = 60
--   the study's iterations (its study file's `iterations`)
-- @param eval_every = 10
--   the study's evaluation interval (its study file's `eval_every`)
CREATE OR REPLACE TEMP MACRO share(k, n) AS CASE WHEN n = 0 THEN NULL ELSE k / n END;

CREATE OR REPLACE TEMP TABLE counts AS
SELECT run_id, any_value(method) AS method, any_value(variant) AS variant, any_value(seed) AS seed, step, protocol,
       count(*) FILTER (WHERE first_wrong_step IS NOT NULL AND feedback_step = first_wrong_step)::DOUBLE AS hits,
       count(*) FILTER (WHERE first_wrong_step IS NOT NULL)::DOUBLE AS stepped_wrong,
       count(*) FILTER (WHERE first_wrong_step IS NULL AND feedback_step IS NOT NULL)::DOUBLE AS alarms,
       count(*) FILTER (WHERE first_wrong_step IS NULL)::DOUBLE AS stepped_right
FROM trajectories
WHERE split = 'bank_' || $split AND protocol IN ('bank', 'bank_frozen') AND method LIKE $method
  AND ($comparison = 'all' OR parent_run_id = $comparison)
  AND 2 * step >= $iterations::INTEGER
  AND (step % $eval_every::INTEGER = 0 OR step = $iterations::INTEGER)
GROUP BY run_id, step, protocol;

CREATE OR REPLACE TEMP TABLE per_step AS
SELECT run_id, any_value(method) AS method, any_value(variant) AS variant, any_value(seed) AS seed, step,
       any_value(share(hits, stepped_wrong)) FILTER (WHERE protocol = 'bank') AS critic_hits,
       any_value(share(alarms, stepped_right)) FILTER (WHERE protocol = 'bank') AS critic_alarm,
       any_value(share(hits, stepped_wrong)) FILTER (WHERE protocol = 'bank_frozen') AS frozen_hits,
       any_value(share(alarms, stepped_right)) FILTER (WHERE protocol = 'bank_frozen') AS frozen_alarm
FROM counts
GROUP BY run_id, step;

SELECT $comparison AS comparison, method, variant, seed, run_id,
       avg((critic_hits - critic_alarm) - (frozen_hits - frozen_alarm)) AS critic_margin,
       avg(critic_hits - frozen_hits) AS hits_margin,
       avg(critic_alarm - frozen_alarm) AS false_alarm_margin,
       count(*) AS window_evaluations
FROM per_step
GROUP BY method, variant, seed, run_id
ORDER BY method, variant NULLS FIRST, seed, run_id;
