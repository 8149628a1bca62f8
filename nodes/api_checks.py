"""Admin API: start a node check and read its result."""

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from kece.api import ContractView, iso
from kece.errors import NotFound
from kece.permissions import USER_AUTHENTICATION, ManagesJudgers
from kece.schema import errors
from nodes.checks import node_check_start
from nodes.models import NodeCheck
from nodes.serializers import CheckOut

TAGS = ["admin"]


class CheckStartedOut(serializers.Serializer):
    checkId = serializers.IntegerField()


def check_json(check) -> dict:
    return {"id": check.pk, "kind": check.kind, "status": check.status, "items": check.items,
            "configRevision": check.config_revision, "startedAt": iso(check.started_at),
            "finishedAt": iso(check.finished_at)}


class CheckStartView(ContractView):
    authentication_classes = USER_AUTHENTICATION
    permission_classes = [ManagesJudgers]

    @extend_schema(tags=TAGS, request=None, responses={202: CheckStartedOut, **errors(409)},
                   summary="Run the connectivity check, then the node's self-check")
    def post(self, request, node_id: int):
        check = node_check_start(node_id=node_id, actor=request.user, now=timezone.now())
        return Response({"checkId": check.pk}, status=202)


class CheckDetailView(ContractView):
    authentication_classes = USER_AUTHENTICATION
    permission_classes = [ManagesJudgers]

    @extend_schema(tags=TAGS, responses={200: CheckOut}, summary="One check and its items")
    def get(self, request, node_id: int, check_id: int):
        check = NodeCheck.objects.filter(pk=check_id, node_id=node_id).first()
        if check is None:
            raise NotFound()
        return Response(check_json(check))
