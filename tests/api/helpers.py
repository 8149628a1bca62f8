"""The people and clients the admin and user API tests share.

`admin` holds `nodes.manage_judgers`; `teacher` is staff without it; `student` is a plain
user. A client authenticates either with a Django session (as the browser does) or with
`Authorization: Token <key>` (DRF authtoken), the two ways the contract allows.
"""

import json

from django.contrib.auth.models import Permission
from django.test import Client
from rest_framework.authtoken.models import Token

from tests.factories import UserFactory, make_node, mark_verified

NODE_KEYS = {
    "id", "name", "pool", "hostGroupId", "baseUrl", "desiredState", "observedState", "maxSlots", "localSlots",
    "running", "lastHeartbeatAt", "agentVersion", "runtimeSpec", "sessionEpoch", "selfCheck", "revision",
    "createdAt",
    # Added to the contract's Node, optional: why the node is quarantined, or null.
    "quarantine",
}
ADMIN = "/api/v1/admin/"
INTERNAL = "/api/v1/internal/judgers/"


def person(username, **fields):
    """A user whose password is stored: `UserFactory` sets it without saving, so the
    session hash `force_login` records would not match the row and the session would be
    dropped on the first request."""
    user = UserFactory(username=username, **fields)
    user.save()
    return user


def make_admin(username="admin"):
    user = person(username)
    user.user_permissions.add(Permission.objects.get(codename="manage_judgers", content_type__app_label="nodes"))
    return user


def make_teacher(username="teacher"):
    return person(username, is_staff=True)


def token_client(user, **kwargs) -> Client:
    key = Token.objects.get_or_create(user=user)[0].key
    return Client(HTTP_AUTHORIZATION=f"Token {key}", **kwargs)


def session_client(user, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def send(client, method, path, body=None, **extra):
    """One JSON request; `body=None` sends an empty body."""
    data = None if body is None else json.dumps(body)
    return getattr(client, method.lower())(path, data=data, content_type="application/json", **extra)


def error_of(response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]


def verified(node):
    """Mark a node's self-check as passed for its current config and runtime."""
    return mark_verified(node)


def ready_node(**kwargs):
    """An ENABLED, healthy, verified node with a fresh heartbeat: observed `ready`."""
    node, identity = make_node(**kwargs)
    return verified(node), identity


def node_client(node, session=None) -> Client:
    """Speaks the node API through the Django test client with the node's bearer credential."""
    headers = {"HTTP_AUTHORIZATION": f"Bearer {node.secret}"}
    if session is not None:
        headers["HTTP_X_JUDGE_SESSION"] = str(session)
    return Client(**headers)


def heartbeat_body(pool="python"):
    return {"agentVersion": "test", "runtimeSpec": f"{pool}-r1", "localSlots": 2, "running": 0,
            "health": {"ok": True, "checks": {"sandbox": True}}}


def join_body(code, pool="python"):
    return {"joinCode": code, "agentVersion": "test", "runtimeSpec": f"{pool}-r1", "localSlots": 2}
