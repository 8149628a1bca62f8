from __future__ import annotations

import hashlib
import hmac

from node_agent.health import proof


def test_the_proof_is_hmac_sha256_of_the_challenge_keyed_with_the_probe_key():
    key, challenge = "pk_0123", "00ff" * 8
    assert proof(key, challenge) == hmac.new(key.encode(), challenge.encode(), hashlib.sha256).hexdigest()
    assert proof(key, challenge.upper()) != proof(key, challenge), "the challenge is used exactly as sent"
