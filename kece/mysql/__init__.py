"""Django's MySQL/MariaDB backend, with transactions opened in one round trip (`base`)."""
