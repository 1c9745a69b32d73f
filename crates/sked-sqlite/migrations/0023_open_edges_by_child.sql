-- A child's edges not counted yet: whether a parent is still left is one probe, however many
-- parents it has (a fan-in of 10,000 counted its open edges at every parent's end).
CREATE INDEX task_edges_open_child ON task_edges (child) WHERE done = 0;
