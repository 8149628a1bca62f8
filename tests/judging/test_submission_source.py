"""A submission's source: kept in its row when submitted, in the content store once a node
asks for it."""

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


def test_submitting_writes_no_file_and_the_first_download_stores_the_source():
    node, identity = make_node(pool="python")
    code = f"print({uuid.uuid4().int})  # 你好\n"
    submission = submit(UserFactory(), make_problem(languages=("python",)), code=code)
    assert not artifacts.path_for(submission.source_digest).exists()

    [job] = claim(identity)
    first = download(node, job, submission.source_digest)
    assert first.status_code == 200 and b"".join(first.streaming_content) == code.encode()
    assert first["X-Content-SHA256"] == submission.source_digest
    assert artifacts.path_for(submission.source_digest).read_bytes() == code.encode()
    again = download(node, job, submission.source_digest)
    assert b"".join(again.streaming_content) == code.encode()

