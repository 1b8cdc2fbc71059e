-- Question: how does the critic's feedback change over training? Per preset, method and training step of one
-- comparison (the latest by default): how much feedback, how long (characters, words, tokens), how varied
-- (vocabulary = distinct lower-cased words over the step's feedback; distinct texts), and what it did (mean gain
-- refined_reward - attempt_reward, mean critic reward).
--
-- Words are the pieces between whitespace, lower-cased, with punctuation at either end stripped; a piece with
-- no letter or digit left is not a word. Training rows only (evaluation feedback is in feedback_use.sql and
-- feedback_search.sql). The runs of one method (seeds) in the comparison are pooled per step; narrow with
-- `run_id`.
--
-- Parameters:
-- @param comparison = latest
--   which runs: the MLflow parent run id of a comparison or study (a unique prefix will do), `latest` (the
--   comparison whose runs started most recently: the parent run whose earliest row is newest), or `all` (every
--   run in the store, standalone `binac train` runs included). `binac sql` resolves `latest` to the parent run id
--   and prints it in its header line; in a store without parent run ids, `latest` means `all`.
-- @param method = %
--   a LIKE pattern on the method (fixed_critic, binac and critic_only are the ones whose critic writes feedback)
-- @param run_id = %
--   a LIKE pattern on the MLflow run id
CREATE OR REPLACE TEMP TABLE fb AS
SELECT preset, method, step, run_id, feedback, feedback_tokens, attempt_reward, refined_reward, critic_reward
FROM trajectories
WHERE split = 'train' AND feedback IS NOT NULL AND method LIKE $method AND run_id LIKE $run_id
  AND ($comparison = 'all' OR parent_run_id = $comparison);

CREATE OR REPLACE TEMP TABLE words AS
SELECT preset, method, step, w
FROM (
    SELECT preset, method, step,
           regexp_replace(unnest(string_split_regex(lower(feedback), '\s+')), '^[^a-z0-9]+|[^a-z0-9]+$', '', 'g') AS w
    FROM fb
)
WHERE w <> '';

SELECT $comparison AS comparison, s.preset, s.method, s.step, s.runs, s.feedbacks, s.distinct_texts,
       round(s.mean_chars, 2) AS mean_chars, round(s.mean_words, 2) AS mean_words,
       round(s.mean_tokens, 2) AS mean_tokens, coalesce(v.vocabulary, 0) AS vocabulary,
       round(s.mean_gain, 4) AS mean_gain, round(s.mean_critic_reward, 4) AS mean_critic_reward
FROM (
    SELECT preset, method, step, count(DISTINCT run_id) AS runs, count(*) AS feedbacks,
           count(DISTINCT trim(feedback)) AS distinct_texts, avg(length(feedback)) AS mean_chars,
           avg(len(list_filter(string_split_regex(trim(feedback), '\s+'), lambda x: x <> ''))) AS mean_words,
           avg(feedback_tokens) AS mean_tokens, avg(refined_reward - attempt_reward) AS mean_gain,
           avg(critic_reward) AS mean_critic_reward
    FROM fb
    GROUP BY preset, method, step
) s
LEFT JOIN (
    SELECT preset, method, step, count(DISTINCT w) AS vocabulary FROM words GROUP BY preset, method, step
) v USING (preset, method, step)
ORDER BY s.preset, s.method, s.step;
