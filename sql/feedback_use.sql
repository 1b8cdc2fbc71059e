-- Question: does the actor use the feedback? First-attempt reward vs refined reward, per method and feedback
-- type, over one comparison's runs (the latest by default): how often a refinement fixes a wrong attempt, breaks a
-- right one, or just copies the attempt.
--
-- Feedback types (simple rules on the text, first match wins; case-insensitive):
--   empty          nothing but whitespace
--   self_correct   the fixed self-correction text ("There may be an error in your attempt. Re-check each step.")
--   locates_step   names a step as wrong: "Step 3 is wrong", "step 2 wrong", "error in step 1", "mistake at step 4"
--   approves       says the attempt is right: "looks correct", "is correct", "looks good", "no error(s)/mistake(s)"
--   generic_check  asks to check without saying where: "check your work", "check", "verify", "double-check", "review"
--   hint           an instruction or a math hint: use, try, compute, calculate, consider, recall, remember,
--                  simplify, substitute, factor, multiply, add, subtract, divide, instead, should, answer is
--   other          anything else (on tiny/micro models: mostly unreadable text)
--
-- copied = the refinement is the attempt again (after trimming). fix_rate = share of wrong attempts (reward 0)
-- whose refinement is right (reward > 0); break_rate = share of right attempts whose refinement is wrong.
--
-- Parameters:
-- @param comparison = latest
--   which runs: the MLflow parent run id of a comparison or study (a unique prefix will do), `latest` (the
--   comparison whose runs started most recently: the parent run whose earliest row is newest), or `all` (every
--   run in the store, standalone `binac train` runs included). `binac sql` resolves `latest` to the parent run id
--   and prints it in its header line; in a store without parent run ids, `latest` means `all`.
-- @param split = %
--   a LIKE pattern on the split (train, eval)
-- @param protocol = %
--   a LIKE pattern on the protocol (train rows: train; eval rows: feedback, gated)
-- @param method = %
--   a LIKE pattern on the method
CREATE OR REPLACE TEMP TABLE typed AS
SELECT method, attempt_reward, refined_reward, trim(refined) = trim(attempt) AS copied,
       CASE
           WHEN trim(feedback) = '' THEN 'empty'
           WHEN regexp_matches(feedback, 'there may be an error in your attempt', 'i') THEN 'self_correct'
           WHEN regexp_matches(feedback, 'step\s*\d+\s*(is\s+)?(wrong|incorrect)|(error|mistake)s?\s+(in|at)\s+step\s*\d+', 'i')
               THEN 'locates_step'
           WHEN regexp_matches(feedback, 'looks\s+(correct|good|right)|\bis\s+correct\b|\bno\s+(errors?|mistakes?)\b', 'i')
               THEN 'approves'
           WHEN regexp_matches(feedback, '\b(check|verify|double-check|re-check|recheck|review)\b', 'i')
               THEN 'generic_check'
           WHEN regexp_matches(feedback, '\b(use|try|compute|calculate|consider|recall|remember|simplify|substitute|factor|multiply|add|subtract|divide|instead|should)\b|answer\s+is', 'i')
               THEN 'hint'
           ELSE 'other'
       END AS feedback_type
FROM trajectories
WHERE feedback IS NOT NULL AND refined_reward IS NOT NULL
  AND split LIKE $split AND protocol LIKE $protocol AND method LIKE $method
  AND ($comparison = 'all' OR parent_run_id = $comparison);

SELECT $comparison AS comparison, method, feedback_type, count(*) AS n,
       round(avg(attempt_reward), 4) AS mean_first_reward, round(avg(refined_reward), 4) AS mean_refined_reward,
       round(avg(refined_reward - attempt_reward), 4) AS mean_gain,
       round(avg(CASE WHEN refined_reward > 0 THEN 1.0 ELSE 0.0 END) FILTER (WHERE attempt_reward = 0), 4) AS fix_rate,
       round(avg(CASE WHEN refined_reward = 0 THEN 1.0 ELSE 0.0 END) FILTER (WHERE attempt_reward > 0), 4) AS break_rate,
       round(avg(CASE WHEN copied THEN 1.0 ELSE 0.0 END), 4) AS copy_rate
FROM typed
GROUP BY method, feedback_type
ORDER BY method, n DESC, feedback_type;
