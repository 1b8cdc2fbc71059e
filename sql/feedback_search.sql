-- Question: which feedback texts best match a search phrase? Full-text search over every stored feedback
-- (critic feedback, fixed self-correction text, evaluation feedback), ranked by BM25. Each hit names its run and
-- its comparison (`comparison`: the run's MLflow parent run id; NULL for a standalone run).
--
-- How: BM25 (k1 = 1.2, b = 0.75) over the feedback index that lives beside the shards
-- (`$BINAC_HOME/feedback_index`, see binac_core/store/feedback_index.py): per-shard postings made with DuckDB FTS's
-- tokenizer (Porter stemmer, English stop words, lower-cased, accents stripped), read through the views
-- `feedback_terms` (one row per feedback and term), `feedback_docs` (one row per feedback) and `feedback_stats`
-- (per shard and value of the filter columns: documents by length, postings by term, tf and length). The corpus
-- statistics (number of feedback texts, average length, document frequency of each word) are those of the rows
-- the filters below select, summed from `feedback_stats` (`counts`), so the scores are those of
-- `PRAGMA create_fts_index` built over exactly those rows (building that index at every query instead takes about
-- 5.5 s at a million rows).
-- A word's share of a score depends only on its tf and the text's length, so it is computed once per (word, tf,
-- length) (`parts`) and summed per text (`scores`). Only the best texts are then looked up: those at or above the
-- k-th score, at most k per shard (a shard's texts are numbered in the order ties are ranked in, `doc`), first
-- their ranking columns, then the k rows shown. Each query indexes only the shards written since the last one,
-- and reads immutable files: no lock (timings: bench/store.py, bench/results.md). Rows whose feedback contains
-- none of the words do not appear.
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
counts AS MATERIALIZED (
    SELECT term, tf, len, sum(n)::BIGINT AS n FROM feedback_stats
    WHERE (term IS NULL OR term IN (SELECT t FROM tokens))
      AND method LIKE $method AND split LIKE $split AND ($comparison = 'all' OR parent_run_id = $comparison)
    GROUP BY term, tf, len),
stats AS (
    SELECT count(*) AS num_docs, avg(len) AS avgdl
    FROM (SELECT len, unnest(range(n)) FROM counts WHERE term IS NULL)),  -- each document's length: FTS's avg
shapes AS (SELECT term, tf, len, n FROM counts WHERE term IS NOT NULL),
dfs AS (SELECT term, sum(n)::BIGINT AS df FROM shapes GROUP BY term),
parts AS (
    SELECT term, tf, len,
           log((((SELECT num_docs FROM stats) - df) + 0.5) / (df + 0.5) + 1)
               * ((tf * (1.2 + 1)) / (tf + (1.2 * ((1 - 0.75) + (0.75 * (len / (SELECT avgdl FROM stats))))))) AS part
    FROM shapes JOIN dfs USING (term)),
scores AS MATERIALIZED (
    SELECT shard_no, doc, sum(part) AS score
    FROM feedback_terms JOIN parts USING (term, tf, len)
    WHERE method LIKE $method AND split LIKE $split AND ($comparison = 'all' OR parent_run_id = $comparison)
    GROUP BY shard_no, doc
    HAVING $all_words = 0 OR count(*) = (SELECT count(*) FROM tokens)),
best AS (
    SELECT * FROM scores
    WHERE score >= (SELECT min(score) FROM (SELECT score FROM scores ORDER BY score DESC LIMIT $k))
    QUALIFY row_number() OVER (PARTITION BY shard_no ORDER BY score DESC, doc) <= $k),
ranked AS (
    SELECT shard_no, doc, score FROM best JOIN feedback_docs USING (shard_no, doc)
    ORDER BY score DESC, run_id, step, problem_id, sample_idx, feedback_idx
    LIMIT $k)
SELECT round(score, 4) AS bm25, method, seed, split, protocol, step, problem_id, sample_idx, feedback_idx,
       feedback, attempt_reward, refined_reward, run_id, parent_run_id AS comparison
FROM ranked JOIN feedback_docs USING (shard_no, doc)
ORDER BY score DESC, run_id, step, problem_id, sample_idx, feedback_idx
LIMIT $k;
