"""Public status: the cached per-runtime snapshot (API + homepage)."""

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from kece.api import ContractView
from pools import snapshot


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


class SummaryView(ContractView):
    authentication_classes = []
    permission_classes = [AllowAny]

    @extend_schema(tags=["public"], responses={200: SummaryOut}, auth=[],
                   summary="Per-runtime judging status from the shared cached snapshot")
    def get(self, request):
        return Response(snapshot.read(now=timezone.now()))
