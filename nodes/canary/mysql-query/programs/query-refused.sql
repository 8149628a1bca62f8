-- The restricted user must not read the server's accounts: refused, a runtime error.
SELECT User FROM mysql.user;
