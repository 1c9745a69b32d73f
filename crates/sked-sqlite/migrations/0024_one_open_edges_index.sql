-- One partial index of open edges: by child (whether a child has a parent left, and whether
-- any edge is open at all). An ending finds its parents' edges through task_edges_parent; each
-- edge closed now updates one partial index, not two.
DROP INDEX task_edges_open;
