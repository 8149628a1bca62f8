-- Restocks every item, not only the empty one.
UPDATE items SET qty = 10;
