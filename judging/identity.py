"""Who is calling: a node, proven by its credential, in one session."""

import hashlib
import hmac
from dataclasses import dataclass

from kece.errors import SessionSuperseded, Unauthenticated


def credential_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class NodeIdentity:
    node_id: int
    credential_digest: str
    session_epoch: int
    # The host group the node was in when it authenticated: a hint that saves a read;
    # the claim re-checks it under the locks.
    host_group_id: int | None = None


def check_node_identity(node, identity: NodeIdentity) -> None:
    """Re-check, on the locked node row, that the credential and session are still current.

    The HTTP layer authenticated the caller before the transaction; a revoke, rotation or
    new session may have committed since, and the row under lock is what counts.
    """
    if (
        node is None
        or node.revoked_at is not None
        or not node.credential_digest
        or not hmac.compare_digest(node.credential_digest, identity.credential_digest)
    ):
        raise Unauthenticated("The node credential is unknown or revoked.")
    if not node.session_open or node.session_epoch != identity.session_epoch:
        raise SessionSuperseded(
            f"Session {identity.session_epoch} is not the node's current session; open a new one."
        )
