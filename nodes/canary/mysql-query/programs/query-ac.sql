SELECT i.id, i.name FROM items AS i WHERE i.qty <> 0 ORDER BY i.name;
