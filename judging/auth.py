"""Machine authentication for the node API, separate from user authentication.

The credential travels only in `Authorization: Bearer …`; the server keeps its sha-256
digest and compares digests in constant time. Every state-changing call re-checks the
credential and session on the locked node row, so revocation and rotation take effect
at once. Two calls may rely on an in-process cache of who a credential belongs to: the
long-poll claim (so that idle nodes cost the database nothing per request) and the result
post (the hottest call under load). Both change nothing on the cache's word alone: the
claim and the settle re-check credential and session on the locked node row, and refuse
there. Every change to a node's session, credential or state is broadcast
(`wakeups.node_changed_after_commit`), which drops the cached entry in every process and
makes the node's waiting claim re-read who it is.
"""

import hmac
from dataclasses import dataclass

from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed

from judging.identity import NodeIdentity, credential_digest
from kece.caches import BoundedCache
from kece.converters import whole_number
from kece.errors import SessionSuperseded, Unauthenticated
from nodes.models import JudgeNode

SESSION_HEADER = "HTTP_X_JUDGE_SESSION"
AUTH_CACHE_SECONDS = 60.0
AUTH_CACHE_SIZE = 10000


def bearer_secret(authorization: str) -> str | None:
    scheme, _, secret = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return None
    return secret.strip()


@dataclass(frozen=True)
class NodeAuth:
    node_id: int
    pool: str
    host_group_id: int
    session_epoch: int
    session_open: bool
    desired_state: str
    credential_digest: str
    runtime_spec: str = ""

    @classmethod
    def of(cls, node) -> "NodeAuth":
        return cls(node.pk, node.pool, node.host_group_id, node.session_epoch, node.session_open,
                   node.desired_state, node.credential_digest, node.runtime_spec)

    def identity(self, session_epoch: int) -> NodeIdentity:
        return NodeIdentity(self.node_id, self.credential_digest, session_epoch, self.host_group_id)


def node_for_digest(digest: str):
    node = JudgeNode.objects.filter(credential_digest=digest, revoked_at__isnull=True).first()
    if node is None or not hmac.compare_digest(node.credential_digest or "", digest):
        return None
    return node


auth_cache = BoundedCache(AUTH_CACHE_SIZE, ttl_seconds=AUTH_CACHE_SECONDS)


def lookup_for_waiting(digest: str, *, fresh: bool = False) -> NodeAuth | None:
    """Who `digest` belongs to, from the short cache unless `fresh` (a database read)."""
    if not fresh:
        cached = auth_cache.get(digest)
        if cached is not None:
            return cached
    node = node_for_digest(digest)
    if node is None:
        auth_cache.drop(digest)
        return None
    auth = NodeAuth.of(node)
    auth_cache.put(digest, auth)
    return auth


def authenticate_cached(authorization: str, session_header) -> tuple[NodeAuth, int]:
    """(who, session epoch) for a call whose service re-checks both under the node lock.
    A cached entry that disagrees with the caller's session is read again before refusing."""
    secret = bearer_secret(authorization)
    if secret is None:
        raise Unauthenticated("Use Authorization: Bearer <credential>.")
    digest = credential_digest(secret)
    session = epoch_of(session_header)
    auth = lookup_for_waiting(digest)
    if auth is not None and (session != auth.session_epoch or not auth.session_open):
        auth = lookup_for_waiting(digest, fresh=True)  # the cache may be behind
    if auth is None:
        raise Unauthenticated("The node credential is unknown or revoked.")
    if session is None or session != auth.session_epoch or not auth.session_open:
        raise SessionSuperseded()
    return auth, session


def epoch_of(value) -> int | None:
    """An epoch header's value (session or lease): a whole number in ASCII digits below
    2**31; None for anything else. Not `int()`, which also takes "+1" and "0_1"."""
    epoch = whole_number(value) if isinstance(value, str) else None
    return epoch if epoch is not None and epoch < 2**31 else None


class NodePrincipal:
    """`request.user` for node calls: not a Django user, never staff."""

    is_authenticated = True
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, node):
        self.node = node
        self.pk = None
        self.username = f"node:{node.pk}"

    def has_perm(self, perm, obj=None):
        return False


class NodeCredentialAuthentication(BaseAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        secret = bearer_secret(header)
        if secret is None:
            raise AuthenticationFailed("Use Authorization: Bearer <credential>.")
        node = node_for_digest(credential_digest(secret))
        if node is None:
            raise AuthenticationFailed("The node credential is unknown or revoked.")
        return NodePrincipal(node), node

    def authenticate_header(self, request):
        return 'Bearer realm="kece-judgers"'


def session_identity(request) -> NodeIdentity:
    """The caller's identity for a call that needs the current session (X-Judge-Session)."""
    node = request.auth
    epoch = epoch_of(request.META.get(SESSION_HEADER))
    if epoch is None or epoch != node.session_epoch or not node.session_open:
        raise SessionSuperseded(
            "X-Judge-Session is missing or not the node's current session; open a new session."
        )
    return NodeIdentity(node.pk, node.credential_digest, epoch, node.host_group_id)
