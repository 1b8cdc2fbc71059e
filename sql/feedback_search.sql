-- Question: which feedback texts best match a search phrase? Full-text search over every stored feedback
-- (critic feedback, fixed self-correction text, evaluation feedback), ranked by BM25. Each hit names its run and
-- its comparison (`comparison`: the run's MLflow parent run id; NULL for a standalone run).
--
-- How: BM25 (k1 = 1.2, b = 0.75) over the feedback index that lives beside the shards
-- (`$BINAC_HOME/feedback_index`, see binac_core/store/feedback_index.py): per-shard postings made with DuckDB FTS's
-- tokenizer (Porter stemmer, English stop words, lower-cased, accents stripped), read through the views
-- `feedback_terms` (one row per feedback and term) and `feedback_docs` (one row per feedback). The corpus
-- statistics (number of feedback texts, average length, document frequency of each word) are those of the rows
-- the filters below select, so the scores are those of `PRAGMA create_fts_index` built over exactly those rows
-- (building that index at every query instead takes about 5.5 s at a million rows). Each query indexes only the
-- shards written since the last one, and reads immutable files: no lock, under a second at a million rows
-- (0.8 s; both measured by bench/store.py, bench/results.md). Rows whose feedback contains none of the
-- words do not appear.
-- BM25 favours short texts: a one-word feedback that matches can outrank a long one that matches more words.
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
--   oracle_critic, binac_disc, eval)
-- @param split = %
--   a LIKE pattern on the split (train, eval)
-- @param k = 20
--   how many rows to return
--
-- Example: binac sql sql/feedback_search.sql --param query="check the sign" --param method=binac
WITH tokens AS (SELECT DISTINCT stem(unnest(fts_main__binac_fts_probe.tokenize($query)), 'porter') AS t),
docs AS (SELECT * FROM feedback_docs
         WHERE method LIKE $method AND split LIKE $split AND ($comparison = 'all' OR parent_run_id = $comparison)),
stats AS (SELECT count(*) AS num_docs, avg(len) AS avgdl FROM docs),
hits AS (SELECT shard, row, term, tf, len FROM feedback_terms
         WHERE term IN (SELECT t FROM tokens)
           AND method LIKE $method AND split LIKE $split AND ($comparison = 'all' OR parent_run_id = $comparison)),
dfs AS (SELECT term, count(*) AS df FROM hits GROUP BY term),
scores AS (
    SELECT shard, row,
           sum(log((((SELECT num_docs FROM stats) - df) + 0.5) / (df + 0.5) + 1)
               * ((tf * (1.2 + 1)) / (tf + (1.2 * ((1 - 0.75) + (0.75 * (len / (SELECT avgdl FROM stats)))))))) AS score
    FROM hits JOIN dfs USING (term)
    GROUP BY shard, row
    HAVING $all_words = 0 OR count(*) = (SELECT count(*) FROM tokens))
SELECT round(score, 4) AS bm25, method, seed, split, protocol, step, problem_id, sample_idx, feedback_idx,
       feedback, attempt_reward, refined_reward, run_id, parent_run_id AS comparison
FROM scores JOIN docs USING (shard, row)
ORDER BY score DESC, run_id, step, problem_id, sample_idx, feedback_idx
LIMIT $k;
