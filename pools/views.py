"""Public status: the cached per-runtime snapshot (API, homepage panel, top bar).

None of these views touches the database: they read one cache key (`pools.status`). The
summary call and the anonymous homepage are the most requested answers of the site and
change only when the snapshot does (every few seconds): each is encoded or rendered once
per snapshot (and language) and the bytes are kept, so a visit costs one cache read.
"""

import hashlib
import json
import threading

from django.conf import settings
from django.contrib.messages.storage.cookie import CookieStorage
from django.http import HttpResponse, HttpResponseNotModified
from django.shortcuts import render
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.translation import get_language
from django.views.decorators.http import require_GET
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from kece.api import ContractView
from pools import snapshot
from pools.status import judge_status

# A proxy may share one answer among visitors for this long (the snapshot itself is
# recomputed every few seconds, so this adds at most that much age).
SUMMARY_MAX_AGE_S = 5


class PoolStatusOut(serializers.Serializer):
    pool = serializers.CharField()
    label = serializers.CharField()
    status = serializers.ChoiceField(choices=["NORMAL", "QUEUEING", "UNAVAILABLE"])
    pending = serializers.IntegerField()


class SummaryOut(serializers.Serializer):
    asOf = serializers.CharField(allow_null=True)
    freshness = serializers.ChoiceField(choices=["fresh", "stale", "unavailable"])
    readyPools = serializers.IntegerField()
    totalPools = serializers.IntegerField()
    pools = PoolStatusOut(many=True)


class _Recent:
    """The answers for the last few keys (snapshots): enough for the current one and the one
    a slower request may still be serving."""

    def __init__(self, size: int = 8):
        self._size, self._items, self._lock = size, {}, threading.Lock()

    def get(self, key, make):
        value = self._items.get(key)
        if value is None:
            value = make()
            with self._lock:
                if len(self._items) >= self._size:
                    self._items.clear()
                self._items[key] = value
        return value


_summaries = _Recent()
_anonymous_homepages = _Recent()


def _encoded_summary(body: dict) -> tuple[bytes, str]:
    """The body as DRF's JSON renderer writes it, and its ETag."""
    etag = '"' + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32] + '"'
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(), etag


def summary_response(request) -> HttpResponse:
    body = snapshot.read(now=timezone.now())
    # One snapshot (its time) is one body; its freshness is the only part a visit changes.
    content, etag = _summaries.get((body["asOf"], body["freshness"]), lambda: _encoded_summary(body))
    headers = {"ETag": etag, "Cache-Control": f"public, max-age={SUMMARY_MAX_AGE_S}", "Allow": "GET, HEAD, OPTIONS"}
    if etag in {t.strip() for t in request.headers.get("If-None-Match", "").split(",")}:
        return HttpResponseNotModified(headers=headers)
    return HttpResponse(content, content_type="application/json", headers=headers)


class SummaryView(ContractView):
    authentication_classes = []
    permission_classes = [AllowAny]

    def dispatch(self, request, *args, **kwargs):
        # A read of one cached key asked for by every visitor's page every few seconds: the
        # answer is built without DRF's request cycle (it has no input, no authentication
        # and one format). Other methods get the contract's answers from DRF.
        if request.method in ("GET", "HEAD"):
            return summary_response(request)
        return super().dispatch(request, *args, **kwargs)

    @extend_schema(tags=["public"], auth=[],
                   responses={200: SummaryOut, 304: OpenApiResponse(description="Not modified (If-None-Match)")},
                   summary="Per-runtime judging status from the shared cached snapshot")
    def get(self, request):
        return summary_response(request)


def _is_anonymous_and_plain(request) -> bool:
    """No session (so no user), no query and no notices waiting for this visitor (a
    notice travels in a cookie of its own, e.g. after a form sent without a session):
    every such visitor of a page sees the same bytes."""
    return (settings.SESSION_COOKIE_NAME not in request.COOKIES and CookieStorage.cookie_name not in request.COOKIES
            and not request.META.get("QUERY_STRING"))


@require_GET
def home(request):
    if not _is_anonymous_and_plain(request):
        return render(request, "home.html")
    status = judge_status()
    content = _anonymous_homepages.get(
        (status, get_language()),
        lambda: render(request, "home.html", {"judge_status": lambda: status}).content)
    response = HttpResponse(content)
    patch_vary_headers(response, ("Cookie",))  # a signed-in visitor gets another page
    return response


@require_GET
def status_panel(request):
    """The panel again, for its periodic refresh, with the top bar's figure out of band."""
    response = render(request, "pools/status_fragment.html")
    response["Cache-Control"] = "no-store"
    return response
