INSERT INTO items VALUES (1, 'bolt', 5), (2, 'nut', 0), (3, 'washer', 12);
