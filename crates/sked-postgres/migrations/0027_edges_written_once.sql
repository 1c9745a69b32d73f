-- An edge is written once, with its child: a parent's end reads its edges and counts the
-- children down, and only a retry by hand marks a parent's edges done. The room migration 22
-- left on each page for a second write of every edge is no longer needed.
ALTER TABLE sked_task_edges RESET (fillfactor);
