"""The admin API for judge nodes and host groups (`/api/v1/admin/…`)."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from kece.api import AdminView, ContractPagination, iso, validated
from kece.errors import Invalid, NotFound
from kece.schema import errors
from nodes import serializers as s
from nodes.models import DesiredState, JudgeHostGroup, ObservedState
from nodes.api_checks import check_json
from nodes.selectors import filter_nodes, node_audit, node_checks, node_errors, nodes_with_running, pool_figures
from nodes.services import (
    host_group_create, host_group_update, node_issue_join_code, node_register, node_revoke, node_update,
)
from pools.registry import POOLS

TAGS = ["admin"]


def _node_or_404(node_id):
    node = nodes_with_running().select_related("host_group").filter(pk=node_id).first()
    if node is None:
        raise NotFound()
    return node


def _node_json(node, now):
    return s.NodeOut(node, context={"now": now}).data


def _join_code_json(issued):
    return {"joinCode": issued.code, "joinCodeExpiresAt": iso(issued.expires_at)}


class JudgerListView(AdminView):
    @extend_schema(
        tags=TAGS, summary="List judge nodes", responses={200: s.NodePage}, operation_id="v1_admin_judgers_list",
        parameters=[
            OpenApiParameter("pool", str, enum=list(POOLS)),
            OpenApiParameter("state", str, enum=[c for c, _ in DesiredState.choices],
                             description="Matches desiredState."),
            OpenApiParameter("observed", str, enum=list(ObservedState.values), description="Matches observedState."),
            OpenApiParameter("page", int), OpenApiParameter("pageSize", int),
        ],
    )
    def get(self, request):
        now = timezone.now()
        pool = request.query_params.get("pool") or None
        state = request.query_params.get("state") or None
        if pool and pool not in POOLS:
            raise Invalid(f"pool must be one of {', '.join(POOLS)}", fields={"pool": ["unknown pool"]})
        if state and state not in DesiredState.values:
            raise Invalid("unknown state", fields={"state": ["unknown desired state"]})
        observed = request.query_params.get("observed") or None
        if observed and observed not in ObservedState.values:
            raise Invalid("unknown observed state", fields={"observed": ["unknown observed state"]})
        nodes = filter_nodes(nodes_with_running(), pool=pool, state=state, observed=observed, now=now)
        paginator = ContractPagination()
        page = paginator.paginate_queryset(nodes, request, view=self)
        return paginator.get_paginated_response([_node_json(n, now) for n in page])

    @extend_schema(tags=TAGS, summary="Register a node; its one-time join code is shown once",
                   request=s.RegisterIn, responses={201: s.RegisterOut})
    def post(self, request):
        data = validated(s.RegisterIn, request.data)
        now = timezone.now()
        node, issued = node_register(name=data["name"], pool=data["pool"], base_url=data["baseUrl"],
                                     host_group_id=data["hostGroupId"], max_slots=data["maxSlots"],
                                     actor=request.user, now=now)
        return Response({**_node_json(_node_or_404(node.pk), now), **_join_code_json(issued)}, status=201)


class JudgerDetailView(AdminView):
    @extend_schema(tags=TAGS, summary="One node with its checks, recent errors and audit trail",
                   responses={200: s.NodeDetailSchema})
    def get(self, request, node_id: int):
        now = timezone.now()
        node = _node_or_404(node_id)
        checks = [check_json(c) for c in node_checks(node)]
        errors = [{"jobId": j.pk, "error": j.error, "message": j.error_message, "at": iso(j.updated_at)}
                  for j in node_errors(node)]
        audit = [
            {"id": a.pk, "actor": a.actor_name, "action": a.action, "before": a.before, "after": a.after,
             "revision": a.revision, "at": iso(a.created_at)}
            for a in node_audit(node)
        ]
        return Response({**_node_json(node, now), "checks": checks, "recentErrors": errors, "audit": audit})

    @extend_schema(tags=TAGS, summary="Change a node, based on the revision you read",
                   request=s.PatchIn, responses={200: s.NodeSchema, **errors(409)})
    def patch(self, request, node_id: int):
        data = validated(s.PatchIn, request.data)
        names = {"name": "name", "maxSlots": "max_slots", "baseUrl": "base_url", "hostGroupId": "host_group_id",
                 "desiredState": "desired_state"}
        changes = {names[k]: v for k, v in data.items() if k in names}
        now = timezone.now()
        node_update(node_id=node_id, revision=data["revision"], changes=changes, actor=request.user, now=now)
        return Response(_node_json(_node_or_404(node_id), now))


class JoinCodeView(AdminView):
    action = "join_code"

    @extend_schema(tags=TAGS, request=None, responses={201: s.JoinCodeOut},
                   summary="A new one-time join code; earlier codes stop working")
    def post(self, request, node_id: int):
        issued = node_issue_join_code(node_id=node_id, actor=request.user, now=timezone.now(), action=self.action)
        return Response(_join_code_json(issued), status=201)


class RotateView(JoinCodeView):
    action = "rotate"

    @extend_schema(tags=TAGS, request=None, responses={201: s.JoinCodeOut},
                   summary="Rotate the credential: the old one works until the node joins with the new code")
    def post(self, request, node_id: int):
        return super().post(request, node_id)


class RevokeView(AdminView):
    @extend_schema(tags=TAGS, request=s.RevokeIn, responses={200: s.NodeSchema},
                   summary="Revoke at once: credential dead, session closed, leases released, DISABLED")
    def post(self, request, node_id: int):
        data = validated(s.RevokeIn, request.data)  # no body is {}; a body that is no object is refused
        now = timezone.now()
        node_revoke(node_id=node_id, reason=data["reason"], actor=request.user, now=now)
        return Response(_node_json(_node_or_404(node_id), now))


class HostGroupListView(AdminView):
    @extend_schema(tags=TAGS, summary="List host groups", responses={200: s.HostGroupOut(many=True)})
    def get(self, request):
        return Response([s.host_group_out(g) for g in JudgeHostGroup.objects.order_by("name", "id")])

    @extend_schema(tags=TAGS, summary="Create a host group", request=s.HostGroupIn, responses={201: s.HostGroupOut})
    def post(self, request):
        data = validated(s.HostGroupIn, request.data)
        group = host_group_create(name=data["name"], host_id=data["hostId"], total_slots=data["totalSlots"],
                                  actor=request.user)
        return Response(s.host_group_out(group), status=201)


class HostGroupDetailView(AdminView):
    @extend_schema(tags=TAGS, summary="Change a host group, based on the revision you read",
                   request=s.HostGroupPatchIn, responses={200: s.HostGroupOut, **errors(409)})
    def patch(self, request, group_id: int):
        data = validated(s.HostGroupPatchIn, request.data)
        names = {"name": "name", "hostId": "host_id", "totalSlots": "total_slots", "status": "status"}
        changes = {names[k]: v for k, v in data.items() if k in names}
        group = host_group_update(group_id=group_id, revision=data["revision"], changes=changes,
                                  actor=request.user)
        return Response(s.host_group_out(group))


class PoolFiguresView(AdminView):
    @extend_schema(tags=TAGS, summary="Per-pool queue and capacity figures", responses={200: s.PoolFiguresOut(many=True)})
    def get(self, request):
        return Response(pool_figures(now=timezone.now()))
