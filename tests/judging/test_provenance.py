"""A verdict's provenance: the node that judged it (by the name it had then), the runtime spec,
the lease, the digest of the test data it was given and when — recorded with the verdict under
its lease, shown to the owner and admins on the submission's page and in the admin history,
one block per judged generation after a rejudge."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import JudgeJob
from judging.services.rejudge import submission_rejudge
from judging.services.snapshot import judged_data_digest
from nodes.models import JudgeNode
from tests.api.helpers import ADMIN, make_admin, session_client, token_client
from tests.factories import HostGroupFactory, UserFactory, make_node
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db]


@pytest.fixture
def pair(db):
    group = HostGroupFactory(total_slots=8)
    return (make_node(pool="python", name="lab-python-1", host_group=group),
            make_node(pool="python", name="lab-python-2", host_group=group))


def _judged_on(identity, *, now):
    [job] = claim(identity, now=now)
    assert settle(identity, judged(job), now=now + timedelta(seconds=3)) == "settled"
    return JudgeJob.objects.get(pk=job.pk)


def test_the_settle_records_the_node_its_spec_and_the_test_data_with_the_verdict(problem, pair):
    (first, first_id), _ = pair
    submit(UserFactory(), problem)
    now = timezone.now()
    job = _judged_on(first_id, now=now)
    assert (job.settled_node_id, job.settled_node_name, job.settled_runtime_spec, job.settled_lease_epoch) == (
        first.pk, "lab-python-1", "python-r1", 1)
    assert re.fullmatch(r"[0-9a-f]{64}", job.settled_manifest_digest)
    assert job.settled_manifest_digest == judged_data_digest(job.snapshot)
    assert (job.finished_at - job.started_at) == timedelta(seconds=3)


def test_the_owner_and_an_admin_see_who_judged_it_and_another_student_does_not(problem, pair):
    (first, first_id), _ = pair
    owner = UserFactory()
    submission = submit(owner, problem)
    job = _judged_on(first_id, now=timezone.now())
    # Renamed later: the page still names the node as it was when it judged.
    JudgeNode.objects.filter(pk=first.pk).update(name="renamed-later")
    url = f"/submissions/ALGO/{submission.pk}"
    for viewer in (owner, make_admin()):
        page = session_client(viewer).get(url).content.decode()
        assert "Who judged it" in page
        assert "Generation 1: the result shown" in page
        assert "lab-python-1" in page and "renamed-later" not in page
        assert "python-r1" in page and "CPython 3" in page
        assert "epoch 1" in page
        assert job.settled_manifest_digest in page
        assert job.started_at.strftime("%Y-%m-%d %H:%M:%S") in page
    other = session_client(UserFactory())
    answer = other.get(url)
    assert answer.status_code == 404
    assert "lab-python-1" not in answer.content.decode()


def test_the_admin_api_gives_the_same_provenance(problem, pair):
    (first, first_id), _ = pair
    submission = submit(UserFactory(), problem)
    job = _judged_on(first_id, now=timezone.now())
    body = token_client(make_admin()).get(ADMIN + f"submissions/ALGO/{submission.pk}").json()
    expected = {"nodeId": first.pk, "nodeName": "lab-python-1", "runtimeSpec": "python-r1",
                "runtimeLabel": "CPython 3", "leaseEpoch": 1, "manifestId": job.manifest_id,
                "manifestVersion": job.snapshot["manifestVersion"], "manifestDigest": job.settled_manifest_digest,
                "verdict": "AC"}
    provenance = body["provenance"]
    assert {k: provenance[k] for k in expected} == expected
    assert provenance["claimedAt"].endswith("Z") and provenance["finishedAt"].endswith("Z")
    assert provenance["claimedAt"] < provenance["finishedAt"]
    assert body["jobs"][0]["provenance"] == provenance


def test_a_rejudge_shows_each_generations_provenance(problem, pair):
    (first, first_id), (second, second_id) = pair
    owner = UserFactory()
    submission = submit(owner, problem)
    now = timezone.now()
    [job] = claim(first_id, now=now)
    settle(first_id, judged(job, verdict="WA"), now=now)
    submission_rejudge(submission_type="ALGO", submission_id=submission.pk, now=now + timedelta(seconds=5))
    _judged_on(second_id, now=now + timedelta(seconds=10))
    body = token_client(make_admin()).get(ADMIN + f"submissions/ALGO/{submission.pk}").json()
    assert [(g["generation"], g["provenance"]["nodeName"]) for g in body["jobs"]] == [
        (1, "lab-python-1"), (2, "lab-python-2")]
    assert (body["provenance"]["nodeName"], body["provenance"]["nodeId"]) == ("lab-python-2", second.pk)
    page = session_client(owner).get(f"/submissions/ALGO/{submission.pk}").content.decode()
    newer, older = page.index("Generation 2: the result shown"), page.index("Generation 1: replaced by a later judgement")
    assert newer < older, "the verdict that counts comes first"
    assert page.index("lab-python-2") < older < page.index("lab-python-1")
    assert page.index("Accepted", newer) < older < page.index("Wrong answer", older)
    # The lease history agrees: the first generation's verdict was replaced, the second's is shown.
    history = page[page.index("Judging history"):]
    assert history.index("Judged, then replaced by a rejudge") < history.index("Judged: this is the result")


def test_a_submission_not_judged_yet_has_no_provenance(problem, pair):
    owner = UserFactory()
    submission = submit(owner, problem)
    assert "Who judged it" not in session_client(owner).get(f"/submissions/ALGO/{submission.pk}").content.decode()
    body = token_client(make_admin()).get(ADMIN + f"submissions/ALGO/{submission.pk}").json()
    assert body["provenance"] is None and body["jobs"][0]["provenance"] is None


def test_the_runtime_is_described_in_the_pages_language_and_in_english_in_the_api(problem):
    """A runtime's description is English in the registry: the API says it as it is, a page
    in its reader's language (a Chinese page showed "GNU C++17, -O2" in English)."""
    owner = UserFactory()
    _, identity = make_node(pool="cpp")
    submission = submit(owner, problem, language="cpp")
    _judged_on(identity, now=timezone.now())
    url = f"/submissions/ALGO/{submission.pk}"
    assert "cpp-r1 <span class=\"muted\">(GNU C++17，-O2)</span>" in session_client(owner).get(
        url, HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()
    body = token_client(make_admin()).get(ADMIN + f"submissions/ALGO/{submission.pk}",
                                          HTTP_ACCEPT_LANGUAGE="zh-CN").json()
    assert body["provenance"]["runtimeLabel"] == "GNU C++17, -O2"
