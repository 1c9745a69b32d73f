-- An edge is written twice: made with its child, marked done when its parent ends. Room left
-- on each page lets the second write stay on the page without touching the two indexes
-- (`done` is in neither): the release of a parent's children rewrites every edge it has.
ALTER TABLE sked_task_edges SET (fillfactor = 50);
