"""A submission's source: kept in its row, served from it to the node that holds its job's
lease; no file is written for it."""

import uuid

import pytest

from judging import artifacts
from tests.api.helpers import INTERNAL, node_client
from tests.factories import UserFactory, make_node, make_problem
from tests.judging.helpers import claim, submit

pytestmark = pytest.mark.django_db


def download(node, job, digest):
    return node_client(node, session=node.session_epoch).get(
        f"{INTERNAL}jobs/{job.pk}/artifacts/{digest}", HTTP_X_JUDGE_LEASE=str(job.lease_epoch))


def test_the_source_is_served_from_its_row_and_never_written_to_the_store():
    node, identity = make_node(pool="python")
    code = f"print({uuid.uuid4().int})  # 你好\n"
    submission = submit(UserFactory(), make_problem(languages=("python",)), code=code)
    assert not artifacts.path_for(submission.source_digest).exists()

    [job] = claim(identity)
    first = download(node, job, submission.source_digest)
    assert first.status_code == 200 and first.content == code.encode()
    assert first["X-Content-SHA256"] == submission.source_digest
    assert first["Content-Length"] == str(len(code.encode()))
    assert not artifacts.path_for(submission.source_digest).exists()
    again = download(node, job, submission.source_digest)
    assert again.status_code == 200 and again.content == code.encode()


def test_a_source_whose_row_no_longer_matches_its_digest_is_not_served():
    node, identity = make_node(pool="python")
    submission = submit(UserFactory(), make_problem(languages=("python",)), code="print(1)\n")
    [job] = claim(identity)
    type(submission).objects.filter(pk=submission.pk).update(code="print(2)\n")
    answer = download(node, job, submission.source_digest)
    assert answer.status_code == 503 and answer.json()["error"] == "unavailable"
