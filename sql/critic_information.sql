-- Question: what can the critic's update still learn? Per method (and run) and bin of training iterations of one
-- comparison or study (the latest by default), the critic's reward information recomputed from the stored
-- training rows (critic_reward, attempt_reward, refined_reward and, on the synthetic task, the first-error
-- columns). The definitions are stated once, in the docstring of binac_core/reports/measures.py ("The critic's
-- reward information"); with bin = 1 and per_run = 1 each column equals the MLflow metric train/<column> of the
-- run at that step. A feedback group is one attempt's K feedbacks (problem_id, sample_idx).
--   groups                    feedback groups with critic rewards in the bin
--   critic_flat_frac          share of groups whose critic rewards are all equal (every critic advantage 0)
--   critic_reward_spread      mean over groups of max - min of the group's critic rewards
--   critic_wrong_frac         share of groups whose attempt is wrong (attempt_reward <= 0)
--   hint_value                synthetic task: over feedback on attempts with a first wrong step, mean r1 after
--                             feedback naming that step minus mean r1 after feedback naming another step
--   r1_after_approving_right  synthetic task: mean r1 after feedback approving a right attempt
-- A bin pools its rows (shares and means over the bin's groups or rows, not a mean of per-iteration values);
-- bin_start is its first iteration: iterations bin_start .. bin_start + bin - 1.
--
-- Parameters:
-- @param comparison = latest
--   which runs: the MLflow parent run id of a comparison or study (a unique prefix will do), `latest` (the
--   comparison whose runs started most recently), or `all` (every run in the store, `binac train` runs
--   included). `binac sql` resolves `latest` and prints it in its header line.
-- @param method = %
--   a LIKE pattern on the method (binac, binac_lam0, binac_after, binac_disc, critic_only train a critic)
-- @param bin = 10
--   iterations per bin (1: every iteration)
-- @param per_run = 0
--   1: one row per run and bin (with its run_id and seed) instead of pooling the method's runs
CREATE OR REPLACE TEMP TABLE fb AS
SELECT run_id, method, preset, seed, step, (step - 1) // $bin * $bin + 1 AS bin_start, problem_id, sample_idx,
       critic_reward, attempt_reward, refined_reward, first_wrong_step, feedback_step, feedback_approves
FROM trajectories
WHERE split = 'train' AND critic_reward IS NOT NULL AND method LIKE $method
  AND ($comparison = 'all' OR parent_run_id = $comparison);

CREATE OR REPLACE TEMP TABLE grp AS
SELECT run_id, method, bin_start, max(critic_reward) - min(critic_reward) AS spread,
       bool_and(attempt_reward <= 0) AS wrong
FROM fb
GROUP BY run_id, method, bin_start, step, problem_id, sample_idx;

SELECT $comparison AS comparison, g.method, any_value(g.preset) AS preset,
       CASE WHEN $per_run = 1 THEN any_value(g.run_id) END AS run_id,
       CASE WHEN $per_run = 1 THEN any_value(g.seed) END AS seed, count(DISTINCT g.run_id) AS runs, g.bin_start,
       any_value(g.groups) AS groups, any_value(g.critic_flat_frac) AS critic_flat_frac,
       any_value(g.critic_reward_spread) AS critic_reward_spread,
       any_value(g.critic_wrong_frac) AS critic_wrong_frac, any_value(h.hint_value) AS hint_value,
       any_value(h.r1_after_approving_right) AS r1_after_approving_right
FROM (
    SELECT method, bin_start, CASE WHEN $per_run = 1 THEN grp.run_id END AS run_key,
           any_value(grp.run_id) AS run_id, any_value(f.preset) AS preset, any_value(f.seed) AS seed,
           count(*) AS groups, avg((spread = 0)::INT) AS critic_flat_frac, avg(spread) AS critic_reward_spread,
           avg(wrong::INT) AS critic_wrong_frac
    FROM grp
    JOIN (SELECT DISTINCT run_id, preset, seed FROM fb) f USING (run_id)
    GROUP BY method, bin_start, run_key
) g
LEFT JOIN (
    SELECT method, bin_start, CASE WHEN $per_run = 1 THEN run_id END AS run_key,
           avg(refined_reward) FILTER (WHERE first_wrong_step IS NOT NULL AND feedback_step = first_wrong_step)
           - avg(refined_reward) FILTER (WHERE first_wrong_step IS NOT NULL AND feedback_step <> first_wrong_step)
               AS hint_value,
           avg(refined_reward) FILTER (WHERE feedback_approves AND attempt_reward > 0) AS r1_after_approving_right
    FROM fb
    GROUP BY method, bin_start, run_key
) h ON g.method = h.method AND g.bin_start = h.bin_start AND g.run_key IS NOT DISTINCT FROM h.run_key
GROUP BY g.method, g.bin_start, g.run_key
ORDER BY g.method, g.bin_start, seed;
