"""Django admin for the libraries' own rows: an API token names its user by id, not from a
list of every account (tens of thousands in a term: a page of megabytes, seconds to build)."""

from rest_framework.authtoken.admin import TokenAdmin

TokenAdmin.raw_id_fields = ["user"]
