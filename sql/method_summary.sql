-- Question: how did each method do in one comparison? A per-method summary computed from the stored trajectories
-- that equals the numbers MLflow holds (column names are the MLflow metric names): for every training run of the
-- comparison, its metrics at its last training step and at its last evaluation, then per preset and method the
-- mean over the runs (seeds) and, for the eval columns, the 95 % Student-t half-width over seeds (`_ci95`, NULL
-- with one seed), as the compare report does. The comparison's parent run in MLflow holds the same eval numbers as
-- `summary/<method>/acc_single`, `summary/<method>/acc_single_ci95`, `summary/<method>/acc_gated_k<K>`, ... (the report shows them in %).
--
-- How each MLflow metric of a run follows from its rows (tasks/store.py, binac_core/rl/evaluation.py):
--   train/reward_first       mean attempt_reward of the step's train rows, one per attempt (feedback_idx = 0)
--   train/reward_refined     mean refined_reward of the step's train rows (one per attempt x feedback)
--   train/feedback_gain      mean refined_reward - attempt_reward of those rows
--   train/critic_reward      mean critic_reward of those rows
--   eval/acc_single          mean attempt_reward of the eval rows of protocol single
--   eval/acc_single_greedy   mean attempt_reward of the eval rows of protocol single_greedy (one greedy answer
--                            per problem, temperature 0; the synthetic task by default, generation.eval_greedy)
--   eval/acc_feedback        mean refined_reward of the eval rows of protocol feedback
--   eval/acc_gated_k<K>      share of eval samples (problem_id, sample_idx) solved single-turn or in any gated
--                            round (refined_reward > 0); K = the config's gated_k (gated_rounds <= K: rounds used)
--   eval/acc_feedback_exec   as acc_feedback, protocol feedback_exec (code benchmarks: the critic is shown the
--   eval/acc_gated_exec_k<K> tests' execution result); as acc_gated_k<K>, protocol gated_exec
-- NULL where a run has no such rows (grpo: no training feedback). eval/acc_single at step 0 (before training) is
-- `eval/acc_single_start`. A run that is still training is summarised as it stands. The half-width uses the
-- Student-t quantile t(0.975, seeds - 1): exact for up to 31 seeds, a Cornish-Fisher expansion (within 3e-8)
-- beyond.
--
-- Parameters:
-- @param comparison = latest
--   which runs: the MLflow parent run id of a comparison or study (a unique prefix will do), `latest` (the
--   comparison whose runs started most recently: the parent run whose earliest row is newest), or `all` (every
--   run in the store, standalone `binac train` runs included). `binac sql` resolves `latest` to the parent run id
--   before the query runs and prints it in its header line; a store without parent run ids (only standalone runs,
--   or written before rows carried one) has no comparison, and `latest` means `all` there.
-- @param preset = %
--   a LIKE pattern on the preset (a study's parent run covers several presets, one per regime)
-- @param method = %
--   a LIKE pattern on the method
-- @param per_run = 0
--   1: one row per training run instead of one per preset and method
CREATE OR REPLACE TEMP MACRO cornish_fisher(z, df) AS  -- t(p, df) from the normal quantile z = z(p), df large
    z + (z ^ 3 + z) / (4 * df) + (5 * z ^ 5 + 16 * z ^ 3 + 3 * z) / (96 * df ^ 2)
    + (3 * z ^ 7 + 19 * z ^ 5 + 17 * z ^ 3 - 15 * z) / (384 * df ^ 3)
    + (79 * z ^ 9 + 776 * z ^ 7 + 1482 * z ^ 5 - 1920 * z ^ 3 - 945 * z) / (92160 * df ^ 4);

CREATE OR REPLACE TEMP MACRO t975(df) AS  -- the 0.975 quantile of Student's t with df degrees of freedom
    CASE
        WHEN df < 1 THEN NULL
        WHEN df <= 30 THEN ([12.706204736174694, 4.302652729749462, 3.1824463052837078, 2.7764451051977934,
                             2.5705818356363146, 2.4469118511449786, 2.364624251592784, 2.306004135204166,
                             2.262157162798205, 2.228138851986274, 2.200985160091639, 2.1788128296672284,
                             2.1603686564627913, 2.144786687917804, 2.131449545559776, 2.1199052992212546,
                             2.1098155778333156, 2.1009220402410382, 2.0930240544083087, 2.085963447265864,
                             2.0796138447276795, 2.0738730679040254, 2.0686576104190486, 2.0638985616280245,
                             2.0595385527532972, 2.0555294386428735, 2.0518305164802846, 2.0484071417952454,
                             2.045229642132703, 2.0422724563012378]::DOUBLE[])[df]
        ELSE cornish_fisher(1.959963984540054::DOUBLE, df::DOUBLE)
    END;

CREATE OR REPLACE TEMP MACRO ci95(x) AS t975(count(x) - 1) * stddev_samp(x) / sqrt(count(x));

CREATE OR REPLACE TEMP TABLE rows AS
SELECT * FROM trajectories
WHERE ($comparison = 'all' OR parent_run_id = $comparison)
  AND preset LIKE $preset AND method LIKE $method AND method <> 'eval';

CREATE OR REPLACE TEMP TABLE last_steps AS
SELECT run_id, any_value(method) AS method, any_value(preset) AS preset, any_value(seed) AS seed,
       max(step) FILTER (WHERE split = 'train') AS last_train_step,
       max(step) FILTER (WHERE split = 'eval') AS last_eval_step
FROM rows GROUP BY run_id;

CREATE OR REPLACE TEMP TABLE last_eval AS  -- per run and eval protocol, its rows at the run's last evaluation
SELECT r.run_id, r.protocol, count(*) AS n, avg(r.attempt_reward) AS first_acc,
       count(*) FILTER (WHERE r.attempt_reward > 0) AS solved_first, avg(r.refined_reward) AS refined_acc,
       count(DISTINCT (r.problem_id, r.sample_idx)) FILTER (WHERE r.refined_reward > 0) AS solved_later,
       max(r.round) AS rounds
FROM rows r JOIN last_steps l ON r.run_id = l.run_id AND r.step = l.last_eval_step
WHERE r.split = 'eval' GROUP BY r.run_id, r.protocol;

CREATE OR REPLACE TEMP TABLE per_run AS
SELECT l.run_id, l.method, l.preset, l.seed, l.last_train_step AS iterations, l.last_eval_step,
       t.reward_first, t.reward_refined, t.feedback_gain, t.critic_reward,
       e0.acc_single AS acc_single_start, s.first_acc AS acc_single, sg.first_acc AS acc_single_greedy,
       f.refined_acc AS acc_feedback,
       CASE WHEN f.n IS NOT NULL THEN (s.solved_first + coalesce(g.solved_later, 0)) / s.n END AS acc_gated,
       g.rounds AS gated_rounds, fx.refined_acc AS acc_feedback_exec,
       CASE WHEN fx.n IS NOT NULL THEN (s.solved_first + coalesce(gx.solved_later, 0)) / s.n END AS acc_gated_exec
FROM last_steps l
LEFT JOIN (
    SELECT r.run_id, avg(r.attempt_reward) FILTER (WHERE r.feedback_idx = 0) AS reward_first,
           avg(r.refined_reward) AS reward_refined, avg(r.refined_reward - r.attempt_reward) AS feedback_gain,
           avg(r.critic_reward) AS critic_reward
    FROM rows r JOIN last_steps l ON r.run_id = l.run_id AND r.step = l.last_train_step
    WHERE r.split = 'train' GROUP BY r.run_id
) t ON t.run_id = l.run_id
LEFT JOIN (
    SELECT run_id, avg(attempt_reward) AS acc_single FROM rows
    WHERE split = 'eval' AND protocol = 'single' AND step = 0 GROUP BY run_id
) e0 ON e0.run_id = l.run_id
LEFT JOIN last_eval s ON s.run_id = l.run_id AND s.protocol = 'single'
LEFT JOIN last_eval sg ON sg.run_id = l.run_id AND sg.protocol = 'single_greedy'
LEFT JOIN last_eval f ON f.run_id = l.run_id AND f.protocol = 'feedback'
LEFT JOIN last_eval g ON g.run_id = l.run_id AND g.protocol = 'gated'
LEFT JOIN last_eval fx ON fx.run_id = l.run_id AND fx.protocol = 'feedback_exec'
LEFT JOIN last_eval gx ON gx.run_id = l.run_id AND gx.protocol = 'gated_exec';

SELECT $comparison AS comparison, preset, method, CASE WHEN $per_run = 1 THEN any_value(run_id) END AS run_id,
       count(*) AS runs, list(seed ORDER BY seed) AS seeds, avg(iterations) AS iterations,
       avg(reward_first) AS "train/reward_first", avg(reward_refined) AS "train/reward_refined",
       avg(feedback_gain) AS "train/feedback_gain", avg(critic_reward) AS "train/critic_reward",
       avg(acc_single_start) AS "eval/acc_single_start",
       avg(acc_single) AS "eval/acc_single", ci95(acc_single) AS "eval/acc_single_ci95",
       avg(acc_single_greedy) AS "eval/acc_single_greedy", ci95(acc_single_greedy) AS "eval/acc_single_greedy_ci95",
       avg(acc_feedback) AS "eval/acc_feedback", ci95(acc_feedback) AS "eval/acc_feedback_ci95",
       avg(acc_gated) AS "eval/acc_gated", ci95(acc_gated) AS "eval/acc_gated_ci95",
       max(gated_rounds) AS gated_rounds, avg(acc_feedback_exec) AS "eval/acc_feedback_exec",
       ci95(acc_feedback_exec) AS "eval/acc_feedback_exec_ci95",
       avg(acc_gated_exec) AS "eval/acc_gated_exec", ci95(acc_gated_exec) AS "eval/acc_gated_exec_ci95"
FROM per_run
GROUP BY preset, method, CASE WHEN $per_run = 1 THEN run_id END
ORDER BY preset, method, run_id;
