"""Token authentication of the user and admin APIs (`Authorization: Token …`).

DRF's own, with its lookup — `Token.objects.select_related("user").get(key=…)`, compiled
anew on every request, a large part of a submission's cost — made one plain join that
reads the same rows. The same answers and errors otherwise.
"""

import hmac

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions
from rest_framework.authtoken.models import Token

from kece.rows import load_joined
from kece.rows import shape as row_shape


def _token_with_user(key: str):
    token_shape, user_shape = row_shape(Token), row_shape(get_user_model())
    user_column = connection.ops.quote_name(Token._meta.get_field("user").column)
    sql = (f"SELECT {token_shape.columns_of('t')}, {user_shape.columns_of('u')} FROM {token_shape.table} t"
           f" JOIN {user_shape.table} u ON u.{user_shape.pk_column} = t.{user_column}"
           f" WHERE t.{token_shape.pk_column} = %s")
    found = load_joined(token_shape, user_shape, sql, [key])
    if found is None:
        return None
    token, token.user = found
    # The column's collation ignores case and accents: the key must be the one issued, letter
    # for letter.
    return token if hmac.compare_digest(token.key.encode(), key.encode()) else None


class TokenAuthentication(authentication.TokenAuthentication):
    def authenticate_credentials(self, key):
        token = _token_with_user(key)
        if token is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        return token.user, token
