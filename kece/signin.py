"""Password sign-in refused after repeated failures (django-axes, wired in the settings).

Failures are counted per account and client address together: the fifth wrong password
for one account from one address refuses that pair for `KECE_SIGNIN_LOCKOUT_MINUTES`, even with
the right password, and without hashing it (the lockout is checked by the first
authentication backend, before the password's). Neither the account's owner elsewhere nor
the other accounts behind the same address (a classroom behind one NAT signing in at an
exam's start) are refused. Bounding how fast one address may try many accounts is the
proxy's (`deploy/compose/nginx.conf`).
"""

from django.contrib.auth.forms import AuthenticationForm
from django.db.models import Max
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import ngettext
from rest_framework.throttling import BaseThrottle


def client_address(request) -> str:
    """The address failures are counted for: the one DRF's throttles count (the join
    throttle's), so that `KECE_NUM_PROXIES` decides both."""
    return BaseThrottle().get_ident(request)


def _seconds_left(request, username: str) -> int:
    from axes.models import AccessAttempt
    from django.conf import settings

    last = AccessAttempt.objects.filter(username=username, ip_address=client_address(request)).aggregate(
        last=Max("attempt_time"))["last"]
    if last is None:
        return int(settings.AXES_COOLOFF_TIME.total_seconds())
    return max(1, int((last + settings.AXES_COOLOFF_TIME - timezone.now()).total_seconds()))


def refused(request, original_response=None, credentials=None):
    """The sign-in page again, saying why and for how long (django-axes'
    `AXES_LOCKOUT_CALLABLE`, for the site's form and the Django admin's alike)."""
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    seconds = _seconds_left(request, username)
    minutes = -(-seconds // 60)
    form = AuthenticationForm(request, initial={"username": username})
    notice = ngettext(
        "Too many failed sign-ins for this account from your address. Try again in %(minutes)d minute.",
        "Too many failed sign-ins for this account from your address. Try again in %(minutes)d minutes.",
        minutes) % {"minutes": minutes}
    response = render(request, "registration/login.html",
                      {"form": form, "locked_out": notice, "next": request.POST.get("next", "")}, status=429)
    response["Retry-After"] = str(seconds)
    return response
