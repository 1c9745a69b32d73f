-- Claims of a queue limited by a rate alone reserve their starts in a short transaction under
-- the queue's lock, claim outside it, and then correct the reservation to what they took: the
-- row they reserved is named by its id.
ALTER TABLE sked_queue_starts ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY;
