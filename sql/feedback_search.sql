-- Question: which feedback texts best match a search phrase? Full-text search over every stored feedback
-- (critic feedback, fixed self-correction text, evaluation feedback), ranked by BM25. Each hit names its run and
-- its comparison (`comparison`: the run's MLflow parent run id; NULL for a standalone run).
--
-- How: copies the matching feedback rows into a temporary table of this connection (nothing is written to the
-- store), builds a DuckDB FTS index on it (Porter stemmer, English stop words, lower-cased), then ranks with
-- fts_main_feedback_docs.match_bm25. Rows whose feedback contains none of the words do not appear. BM25 favours
-- short texts: a one-word feedback that matches can outrank a long one that matches more words.
--
-- Parameters:
-- @param comparison = all
--   which runs: `all` (the default: a search looks for a text wherever it was written, standalone runs and
--   `binac evaluate` included, and each hit says which comparison it came from), a comparison's or study's MLflow
--   parent run id (a unique prefix will do), or `latest` (the comparison whose runs started most recently).
-- @param query = step wrong
--   the search words (stemmed, stop words dropped); a row matches when it has any of them
-- @param all_words = 0
--   1: a row matches only when it has every word of the query
-- @param method = %
--   a LIKE pattern on the method (grpo, fixed_critic, binac, binac_lam0, binac_after, critic_only, self_correct,
--   oracle_critic, eval)
-- @param split = %
--   a LIKE pattern on the split (train, eval)
-- @param k = 20
--   how many rows to return
--
-- Example: binac sql sql/feedback_search.sql --param query="check the sign" --param method=binac
CREATE OR REPLACE TEMP TABLE feedback_docs AS
SELECT row_number() OVER () AS doc_id, run_id, method, seed, step, split, protocol, problem_id, sample_idx,
       feedback_idx, round, feedback, attempt_reward, refined_reward, parent_run_id
FROM trajectories
WHERE feedback IS NOT NULL AND method LIKE $method AND split LIKE $split
  AND ($comparison = 'all' OR parent_run_id = $comparison);

PRAGMA create_fts_index('feedback_docs', 'doc_id', 'feedback', overwrite = 1);

SELECT round(score, 4) AS bm25, method, seed, split, protocol, step, problem_id, sample_idx, feedback_idx,
       feedback, attempt_reward, refined_reward, run_id, parent_run_id AS comparison
FROM (SELECT *, fts_main_feedback_docs.match_bm25(doc_id, $query, conjunctive := $all_words) AS score FROM feedback_docs)
WHERE score IS NOT NULL
ORDER BY score DESC, run_id, step, problem_id, sample_idx, feedback_idx
LIMIT $k;
