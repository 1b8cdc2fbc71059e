-- Question: how does each critic judge the fixed attempt bank? Per run, evaluation step, bank split (val, eval) and
-- critic (`critic`: the method's, protocol bank; `frozen_critic`: the frozen base critic's, protocol bank_frozen),
-- the bank measures recomputed from the stored bank rows, each with its 95 % interval. The definitions are stated
-- once, in binac_core/reports/bank_measures.py and binac_core/reports/measures.py; each value and bound equals the
-- MLflow metric bank_<split>/<critic>_<measure> (and its _lo, _hi) of the run at that step.
-- A run is named by its method, variant label (a study arm's; NULL: none), seed and run id.
--   hits_first_error           over attempts with a wrong written step, the share whose feedback names it
--   false_alarm                over attempts whose every written step is right, the share whose feedback names one
--   approves_wrong             over attempts with a wrong written step, the share whose feedback approves
--   approves_right             over attempts whose first answer is right, the share whose feedback approves
--   verdict_balanced_accuracy  (wrong attempts called incorrect + right attempts called correct) / 2, against the
--                              verifier; its interval is the mean of the two halves' Wilson bounds
-- Intervals: Wilson score intervals (z = 1.959964); *_n is a measure's denominator.
--
-- Parameters:
-- @param comparison = latest
--   which runs: the MLflow parent run id of a comparison or study (a unique prefix will do), `latest` (the
--   comparison whose runs started most recently), or `all` (every run in the store, `binac train` runs
--   included). `binac sql` resolves `latest` and prints it in its header line.
-- @param method = %
--   a LIKE pattern on the method (the bank is scored for methods that train a critic)
CREATE OR REPLACE TEMP MACRO wilson_lo(k, n) AS CASE WHEN n = 0 THEN NULL ELSE greatest(0.0,
    (k / n + 1.959964 ^ 2 / (2 * n) - 1.959964 * sqrt((k / n) * (1 - k / n) / n + 1.959964 ^ 2 / (4 * n * n)))
    / (1 + 1.959964 ^ 2 / n)) END;
CREATE OR REPLACE TEMP MACRO wilson_hi(k, n) AS CASE WHEN n = 0 THEN NULL ELSE least(1.0,
    (k / n + 1.959964 ^ 2 / (2 * n) + 1.959964 * sqrt((k / n) * (1 - k / n) / n + 1.959964 ^ 2 / (4 * n * n)))
    / (1 + 1.959964 ^ 2 / n)) END;
CREATE OR REPLACE TEMP MACRO share(k, n) AS CASE WHEN n = 0 THEN NULL ELSE k / n END;

CREATE OR REPLACE TEMP TABLE counts AS
SELECT run_id, any_value(method) AS method, any_value(variant) AS variant, any_value(seed) AS seed, step,
       replace(split, 'bank_', '') AS bank_split,
       CASE WHEN protocol = 'bank' THEN 'critic' ELSE 'frozen_critic' END AS critic,
       count(*) FILTER (WHERE first_wrong_step IS NOT NULL AND feedback_step = first_wrong_step)::DOUBLE AS hits,
       count(*) FILTER (WHERE first_wrong_step IS NOT NULL)::DOUBLE AS stepped_wrong,
       count(*) FILTER (WHERE first_wrong_step IS NULL AND feedback_step IS NOT NULL)::DOUBLE AS alarms,
       count(*) FILTER (WHERE first_wrong_step IS NULL)::DOUBLE AS stepped_right,
       count(*) FILTER (WHERE first_wrong_step IS NOT NULL AND feedback_approves)::DOUBLE AS approved_wrong,
       count(*) FILTER (WHERE first_wrong_step IS NOT NULL AND feedback_approves IS NOT NULL)::DOUBLE AS judged_wrong,
       count(*) FILTER (WHERE attempt_reward > 0 AND feedback_approves)::DOUBLE AS approved_right,
       count(*) FILTER (WHERE attempt_reward > 0 AND feedback_approves IS NOT NULL)::DOUBLE AS judged_right,
       count(*) FILTER (WHERE attempt_reward <= 0 AND feedback_verdict = 'incorrect')::DOUBLE AS caught,
       count(*) FILTER (WHERE attempt_reward <= 0 AND feedback_verdict IS NOT NULL)::DOUBLE AS verdict_wrong,
       count(*) FILTER (WHERE attempt_reward > 0 AND feedback_verdict = 'correct')::DOUBLE AS kept,
       count(*) FILTER (WHERE attempt_reward > 0 AND feedback_verdict IS NOT NULL)::DOUBLE AS verdict_right
FROM trajectories
WHERE split IN ('bank_val', 'bank_eval') AND method LIKE $method
  AND ($comparison = 'all' OR parent_run_id = $comparison)
GROUP BY run_id, step, split, protocol;

SELECT $comparison AS comparison, method, variant, seed, run_id, step, bank_split, critic,
       share(hits, stepped_wrong) AS hits_first_error, wilson_lo(hits, stepped_wrong) AS hits_first_error_lo,
       wilson_hi(hits, stepped_wrong) AS hits_first_error_hi, stepped_wrong::INTEGER AS hits_first_error_n,
       share(alarms, stepped_right) AS false_alarm, wilson_lo(alarms, stepped_right) AS false_alarm_lo,
       wilson_hi(alarms, stepped_right) AS false_alarm_hi, stepped_right::INTEGER AS false_alarm_n,
       share(approved_wrong, judged_wrong) AS approves_wrong,
       wilson_lo(approved_wrong, judged_wrong) AS approves_wrong_lo,
       wilson_hi(approved_wrong, judged_wrong) AS approves_wrong_hi, judged_wrong::INTEGER AS approves_wrong_n,
       share(approved_right, judged_right) AS approves_right,
       wilson_lo(approved_right, judged_right) AS approves_right_lo,
       wilson_hi(approved_right, judged_right) AS approves_right_hi, judged_right::INTEGER AS approves_right_n,
       (share(caught, verdict_wrong) + share(kept, verdict_right)) / 2 AS verdict_balanced_accuracy,
       (wilson_lo(caught, verdict_wrong) + wilson_lo(kept, verdict_right)) / 2 AS verdict_balanced_accuracy_lo,
       (wilson_hi(caught, verdict_wrong) + wilson_hi(kept, verdict_right)) / 2 AS verdict_balanced_accuracy_hi,
       (verdict_wrong + verdict_right)::INTEGER AS verdict_balanced_accuracy_n
FROM counts
ORDER BY method, variant NULLS FIRST, seed, run_id, step, bank_split DESC, critic;
