SELECT id, name, qty FROM items;
