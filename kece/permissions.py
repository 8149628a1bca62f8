"""Who may call the admin and user APIs, and open the admin pages."""

import functools

from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import BasePermission

from kece.tokens import TokenAuthentication

# Token first: its `WWW-Authenticate` makes an anonymous request a 401, not a 403.
USER_AUTHENTICATION = [TokenAuthentication, SessionAuthentication]

MANAGE_JUDGERS = "nodes.manage_judgers"


def can_manage_judgers(user) -> bool:
    return bool(user and user.is_authenticated and user.is_active and user.has_perm(MANAGE_JUDGERS))


def session_manages_judgers(session_key: str | None) -> bool:
    """Whether the browser session `session_key` still belongs to a user who may manage
    judgers, read afresh: signed out or flushed (no such session), a changed password (its
    hash no longer verifies), a deactivated user or a permission taken away all say no.
    Django's own `get_user`, which reads nothing of a request but its session."""
    from importlib import import_module
    from types import SimpleNamespace

    from django.conf import settings
    from django.contrib.auth import get_user

    if not session_key:
        return False
    session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    return can_manage_judgers(get_user(SimpleNamespace(session=session)))


class _Needs(BasePermission):
    """Anonymous → 401 (via the authenticators), anyone without the permission → 403."""

    allows = staticmethod(lambda user: False)

    def has_permission(self, request, view):
        if not (request.user and request.user.is_authenticated):
            return False
        return self.allows(request.user)


class ManagesJudgers(_Needs):
    """Admins only."""

    message = "Managing judge nodes needs the nodes.manage_judgers permission."
    allows = staticmethod(can_manage_judgers)


MANAGE_EXAMS = "judging.manage_exams"


def can_manage_exams(user) -> bool:
    return bool(user and user.is_authenticated and user.is_active
                and (user.has_perm(MANAGE_EXAMS) or user.has_perm(MANAGE_JUDGERS)))


class ManagesExams(_Needs):
    """Exams, lessons and practices: judging.manage_exams (or nodes.manage_judgers)."""

    message = "Managing exams needs the judging.manage_exams permission."
    allows = staticmethod(can_manage_exams)


def pages_for(allows):
    """A page view decorator: anonymous → the login page; signed in without what `allows`
    checks → the 403 page. Admin pages show live figures (and a join code once): not stored."""
    def decorator(view):
        @functools.wraps(view)
        def guarded(request, *args, **kwargs):
            from django.contrib.auth.views import redirect_to_login
            from django.core.exceptions import PermissionDenied

            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not allows(request.user):
                raise PermissionDenied
            response = view(request, *args, **kwargs)
            response["Cache-Control"] = "no-store"
            return response
        return guarded
    return decorator
