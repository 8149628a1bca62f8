"""Public status: the cached per-runtime snapshot (API, homepage panel, top bar).

None of these views touches the database: they read one cache key (`pools.status`).
"""

import hashlib
import json

from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from kece.api import ContractView
from pools import snapshot

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


def _etag(body: dict) -> str:
    return '"' + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32] + '"'


class SummaryView(ContractView):
    authentication_classes = []
    permission_classes = [AllowAny]

    @extend_schema(tags=["public"], auth=[],
                   responses={200: SummaryOut, 304: OpenApiResponse(description="Not modified (If-None-Match)")},
                   summary="Per-runtime judging status from the shared cached snapshot")
    def get(self, request):
        body = snapshot.read(now=timezone.now())
        etag = _etag(body)
        headers = {"ETag": etag, "Cache-Control": f"public, max-age={SUMMARY_MAX_AGE_S}"}
        if etag in {t.strip() for t in request.headers.get("If-None-Match", "").split(",")}:
            return Response(status=304, headers=headers)
        return Response(body, headers=headers)


@require_GET
def home(request):
    return render(request, "home.html")


@require_GET
def status_panel(request):
    """The panel again, for its periodic refresh, with the top bar's figure out of band."""
    response = render(request, "pools/status_fragment.html")
    response["Cache-Control"] = "no-store"
    return response
