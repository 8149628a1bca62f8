UPDATE items SET qty = 10 WHERE qty = 0;
