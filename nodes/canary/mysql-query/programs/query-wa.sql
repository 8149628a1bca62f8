-- Keeps the item that is out of stock.
SELECT id, name FROM items ORDER BY id;
