SELECT id, name FROM items WHERE qty > 0 ORDER BY id;
