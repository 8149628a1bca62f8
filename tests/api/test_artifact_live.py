"""`GET jobs/{jobId}/artifacts/{digest}` as uvicorn serves it (`kece.asgi` routes it to the
bare `asgi_artifact`, which authenticates from the credential cache): the holder of the lease
gets the bytes with the contract's headers; every refusal is the view's."""

import os

import pytest
import requests

from judging import artifacts
from judging.api.node import CHUNK
from judging.models import JudgeJob
from nodes.models import JudgeNode
from tests.api.helpers import INTERNAL

pytestmark = [pytest.mark.mariadb, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _get(server, node, job, digest=None, *, lease=None, session=1, method="GET", credential=None):
    headers = {"Authorization": f"Bearer {credential or node.secret}", "X-Judge-Session": str(session)}
    if lease is not False:
        headers["X-Judge-Lease"] = str(job.lease_epoch if lease is None else lease)
    digest = digest or job.snapshot["source"]["digest"]
    return requests.request(method, f"{server.url}{INTERNAL}jobs/{job.pk}/artifacts/{digest}", headers=headers,
                            timeout=10)


def _error(response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]


def test_the_lease_holder_downloads_the_source_and_every_case_file(server, leased):
    node, job = leased
    digests = [job.snapshot["source"]["digest"]] + [
        c[side]["digest"] for c in job.snapshot["cases"] for side in ("input", "output")]
    for digest in digests:
        response = _get(server, node, job, digest)
        assert response.status_code == 200
        assert artifacts.sha256_hex(response.content) == digest  # the source from its row, the rest from the store
        assert response.headers["X-Content-SHA256"] == digest
        assert response.headers["Content-Type"] == "application/octet-stream"
        assert response.headers["Content-Length"] == str(len(response.content))


def test_refusals_are_the_contracts(server, leased, node_b):
    node, job = leased
    stranger = artifacts.store_bytes(b"someone else's test data\n")["digest"]
    assert _error(_get(server, node, job, stranger)) == (404, "not_in_manifest")
    assert _error(_get(server, node, job, lease=False)) == (400, "invalid")
    assert _error(_get(server, node, job, lease="x")) == (400, "invalid")
    assert _error(_get(server, node, job, "A" * 64)) == (400, "invalid")
    assert _error(_get(server, node, job, lease=job.lease_epoch + 1)) == (409, "lease_lost")
    assert _error(_get(server, node, job, session=2)) == (409, "session_superseded")
    assert _error(_get(server, node_b[0], job)) == (409, "lease_lost")
    unknown = _get(server, node, job, credential="not-a-credential")
    assert _error(unknown) == (401, "unauthenticated")
    assert unknown.headers["WWW-Authenticate"].startswith("Bearer")
    assert _get(server, node, job, method="POST").status_code == 405


def test_a_credential_revoked_after_it_was_cached_downloads_nothing(server, leased):
    """The cache still knows the credential (the revoke is written here without the broadcast
    that would drop it): the node's row, read with the job's, refuses it."""
    from django.utils import timezone

    node, job = leased
    assert _get(server, node, job).status_code == 200  # cached now
    JudgeNode.objects.filter(pk=node.pk).update(revoked_at=timezone.now())
    assert _error(_get(server, node, job)) == (401, "unauthenticated")
    JudgeNode.objects.filter(pk=node.pk).update(revoked_at=None, session_epoch=2)
    assert _error(_get(server, node, job)) == (409, "session_superseded")
    assert JudgeJob.objects.get(pk=job.pk).state == "RUNNING"


@pytest.mark.parametrize("size", [CHUNK, 2 * CHUNK, 2 * CHUNK + 123])
def test_a_file_of_several_chunks_comes_whole(server, leased, size):
    """The first chunk is read with the lease check; the rest, if any, streams after it."""
    node, job = leased
    data = os.urandom(size)
    entry = artifacts.store_bytes(data)
    snapshot = {**job.snapshot, "cases": [{**job.snapshot["cases"][0], "input": entry}, *job.snapshot["cases"][1:]]}
    JudgeJob.objects.filter(pk=job.pk).update(snapshot=snapshot)
    response = _get(server, node, job, entry["digest"])
    assert response.status_code == 200 and response.content == data
    assert response.headers["Content-Length"] == str(size)
