-- Claims leave paused and limited queues out with NOT EXISTS over sked_queues, which the
-- planner costs from the table's statistics. A table never analyzed is assumed to be of some
-- size, and the planner then read and sorted every available task for each claim. The table is
-- small and seldom changes, so autovacuum seldom analyzes it: analyze it here, and sked does
-- again after every change of queue settings.
ANALYZE sked_queues;
