"""`GET jobs/{jobId}/artifacts/{digest}`: only this node's live lease downloads, and only the
job's own files."""

from datetime import timedelta

import pytest
from django.utils import timezone

from judging import artifacts
from judging.models import JobState, JudgeJob
from tests.api.helpers import INTERNAL, error_of, node_client

pytestmark = pytest.mark.django_db


def _download(node, job, digest=None, *, lease=None, session=1):
    client = node_client(node, session)
    headers = {} if lease is False else {"HTTP_X_JUDGE_LEASE": str(job.lease_epoch if lease is None else lease)}
    return client.get(f"{INTERNAL}jobs/{job.pk}/artifacts/{digest or job.snapshot['source']['digest']}", **headers)


def test_the_lease_holder_downloads_the_source_and_every_case_file(leased):
    node, job = leased
    digests = [job.snapshot["source"]["digest"]] + [
        c[side]["digest"] for c in job.snapshot["cases"] for side in ("input", "output")]
    for digest in digests:
        response = _download(node, job, digest)
        assert response.status_code == 200
        body = response.content if not response.streaming else b"".join(response.streaming_content)
        assert artifacts.sha256_hex(body) == digest  # the source from its row, the rest from the store
        assert response["X-Content-SHA256"] == digest


def test_a_file_that_is_not_the_jobs_is_not_in_its_manifest(leased, problem):
    node, job = leased
    stranger = artifacts.store_bytes(b"someone else's test data\n")["digest"]
    assert error_of(_download(node, job, stranger)) == (404, "not_in_manifest")


@pytest.mark.parametrize("lease", [False, "x", -1, 2**31])
def test_the_lease_header_must_be_an_epoch(leased, lease):
    node, job = leased
    assert error_of(_download(node, job, lease=lease)) == (400, "invalid")


@pytest.mark.parametrize("digest", ["0" * 63, "A" * 64, "g" * 64])
def test_a_digest_is_64_lowercase_hex(leased, digest):
    node, job = leased
    assert error_of(_download(node, job, digest)) == (400, "invalid")


def test_another_lease_epoch_or_session_downloads_nothing(leased):
    node, job = leased
    assert error_of(_download(node, job, lease=job.lease_epoch + 1)) == (409, "lease_lost")
    assert error_of(_download(node, job, session=2)) == (409, "session_superseded")


def test_another_nodes_lease_downloads_nothing(leased, node_b):
    _, job = leased
    assert error_of(_download(node_b[0], job)) == (409, "lease_lost")


@pytest.mark.parametrize("change", [
    {"state": JobState.QUEUED}, {"session_epoch": 0}, {"lease_until": None},
    {"lease_until": timezone.now() - timedelta(seconds=1)},
], ids=["not-running", "earlier-session", "no-deadline", "expired"])
def test_a_lease_that_is_not_live_downloads_nothing(leased, change):
    node, job = leased
    JudgeJob.objects.filter(pk=job.pk).update(**change)
    assert error_of(_download(node, job)) == (409, "lease_lost")


def test_an_unknown_job_downloads_nothing(leased):
    node, job = leased
    job.pk += 1000
    assert error_of(_download(node, job)) == (409, "lease_lost")
