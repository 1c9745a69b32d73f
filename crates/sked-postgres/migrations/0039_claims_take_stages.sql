-- Claims that take a released stage's tasks
-- (docs/decisions/0026-claims-that-take-a-released-stage.md). A stage is kept in parts of at
-- most a claim's size, each a row of sked_stages; a released part is claimable: a claim takes
-- its next tasks (from `taken` on) and makes them rows as its leases, and the part keeps the
-- rest. Anything else that touches a released part makes the rest rows, available.
-- `claimable`: made by a store whose claims take released parts; otherwise the release makes
-- the part's rows, as migration 38 did.
-- `size`: how many tasks it was made with, read without its arrays; `taken`: how many of
-- them claims have taken (the first ones).
ALTER TABLE sked_stages ADD COLUMN claimable boolean NOT NULL DEFAULT false,
                        ADD COLUMN released boolean NOT NULL DEFAULT false,
                        ADD COLUMN size integer,
                        ADD COLUMN taken integer NOT NULL DEFAULT 0;
UPDATE sked_stages SET size = cardinality(ids);
ALTER TABLE sked_stages ALTER COLUMN size SET NOT NULL;
-- The claim's order among released parts: a part's next task sorts by the part's priority
-- and run time, then its id (parts of one stage hold ascending runs of ids).
CREATE INDEX sked_stages_claimable ON sked_stages (priority DESC, run_at, lower(span))
    WHERE released;

-- As migration 38 made it, but the release of a claimable part that is due, in a queue without
-- limits (keyed::LIMITED; the walk of a limited queue reads rows only), marks it released and
-- answers it as one row with no id; a released part's rows are those not taken yet, available.
-- The parameter `released` is named with the function's name: a column of sked_stages has
-- that name now, and a column's name comes first.
CREATE OR REPLACE FUNCTION sked_make_stage_rows(
    ids_ bigint[],
    family boolean,
    workflows_ bigint[],
    every boolean,
    released bigint[],
    cancelled bigint[],
    errors text[],
    now_ timestamptz
) RETURNS TABLE (id bigint, state text, run_at timestamptz, priority integer, wait bigint)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    WITH own AS (
        -- The waits of the tasks `ids_`, rows or kept.
        SELECT t.wait FROM sked_tasks t WHERE family AND t.id = ANY (ids_) AND t.wait IS NOT NULL
        UNION SELECT s.wait FROM sked_stages s
         WHERE family AND s.span @> ANY (ids_) AND s.ids && ids_),
    related AS (
        -- Their children's waits, and the stages their own waits wait for whole.
        SELECT p.wait FROM sked_wait_parents p WHERE family AND p.parent = ANY (ids_)
        UNION SELECT ws.wait FROM sked_wait_stages ws WHERE ws.stage IN (SELECT wait FROM own)
        UNION SELECT ws.stage FROM sked_wait_stages ws WHERE ws.wait IN (SELECT wait FROM own)),
    takes AS (
        -- Only in a call that releases and cancels, and touches nothing else.
        SELECT s.id FROM sked_stages s
         WHERE ids_ IS NULL AND workflows_ IS NULL AND NOT every
           AND s.wait = ANY (sked_make_stage_rows.released)
           AND s.claimable AND NOT s.released AND s.run_at <= now_
           AND NOT EXISTS (SELECT 1 FROM sked_queues q WHERE q.name = s.queue
                             AND (q.concurrency_limit IS NOT NULL OR q.rate_limit IS NOT NULL
                                  OR q.per_key_limit IS NOT NULL
                                  OR q.per_key_rate_limit IS NOT NULL))),
    marked AS (
        UPDATE sked_stages s SET released = true WHERE s.id IN (SELECT id FROM takes)
        RETURNING s.run_at, s.priority, s.wait),
    gone AS (
        DELETE FROM sked_stages s
         WHERE every
            OR (s.span @> ANY (ids_) AND s.ids && ids_)
            OR s.wait IN (SELECT wait FROM related)
            OR s.workflow = ANY (workflows_)
            OR (s.wait = ANY (sked_make_stage_rows.released) AND NOT s.released
                AND s.id NOT IN (SELECT id FROM takes))
            OR s.wait = ANY (cancelled)
        RETURNING s.*),
    made AS (
        INSERT INTO sked_tasks (id, queue, kind, payload, priority, state, run_at,
                                max_attempts, timeout_ms, backoff_base_ms, backoff_max_ms,
                                backoff, has_children, wait, workflow, created_at,
                                last_error, finished_at)
        OVERRIDING SYSTEM VALUE
        SELECT u.id, g.queue, g.kind, u.payload, g.priority,
               CASE WHEN g.released THEN 'available'
                    WHEN e.error IS NOT NULL THEN 'cancelled'
                    WHEN g.wait = ANY (sked_make_stage_rows.released) AND g.run_at <= now_ THEN 'available'
                    WHEN g.wait = ANY (sked_make_stage_rows.released) THEN 'scheduled'
                    ELSE 'waiting' END,
               g.run_at, g.max_attempts, g.timeout_ms, g.backoff_base_ms, g.backoff_max_ms,
               g.backoff, g.has_children, g.wait, g.workflow, g.created_at,
               e.error, CASE WHEN e.error IS NOT NULL THEN now_ END
          FROM gone g
         CROSS JOIN LATERAL unnest(g.ids[g.taken + 1:], g.payloads[g.taken + 1:])
                 AS u(id, payload)
          LEFT JOIN unnest(cancelled, errors) AS e(wait, error) ON e.wait = g.wait
        RETURNING sked_tasks.id, sked_tasks.state, sked_tasks.run_at, sked_tasks.priority,
                  sked_tasks.wait)
    SELECT * FROM made
    UNION ALL SELECT NULL, 'available', run_at, priority, wait FROM marked
$$;
