UPDATE items SET qty = qty + 10 WHERE qty < 1;
