"""Quarantine by what a node does: infrastructure errors, a stall, lost renewals; the refund
of the attempts a faulty node burned; the way back through a passing check."""

from datetime import timedelta

import pytest
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from judging.models import JobState, JudgeJob
from judging.selectors import ready_nodes
from judging.services.leases import RenewItem, jobs_reap_expired, lease_renew
from judging.services.settle import SettleRequest
from nodes.checks import _queue_self_check, node_check_start
from nodes.models import JudgeHostGroup, JudgeNode, NodeAudit
from nodes.quarantine import nodes_quarantine_stalled
from tests.factories import make_node
from tests.judging.helpers import claim, infra_error, judged, settle, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db]

PASSING_ITEMS = ({"name": "python_runs", "ok": True, "detail": "ok"},)


@pytest.fixture
def quarantine_settings(settings):
    settings.KECE_QUARANTINE_INFRA_ERRORS = 3
    settings.KECE_QUARANTINE_RENEW_LOST = 3
    settings.KECE_QUARANTINE_STALL_MS = 60000
    settings.KECE_MAX_ATTEMPTS = 3
    return settings


def _fail_jobs(identity, count, *, now):
    """The node claims `count` jobs and answers INFRA_ERROR to each."""
    jobs = claim(identity, free_slots=count, now=now)
    assert len(jobs) == count
    return [(job, settle(identity, infra_error(job), now=now)) for job in jobs]


def _renew_until_quarantined(node, identity, items, batches: int, *, now) -> list:
    """Send `batches` renew batches of `items`, after which the node must be quarantined
    for lost renewals; returns each batch's answers."""
    answers = [lease_renew(identity=identity, items=items, now=now) for _ in range(batches)]
    node.refresh_from_db()
    assert node.quarantine_reason.startswith("renew_lost:")
    return answers


def _audits(node, action):
    return list(NodeAudit.objects.filter(node_id=node.pk, action=action).values_list("actor_name", flat=True))


def test_infra_errors_on_three_different_jobs_quarantine_the_node(student, problem, node_a, quarantine_settings):
    node, identity = node_a
    now = timezone.now()
    for _ in range(4):
        submit(student, problem, now=now)
    _fail_jobs(identity, 2, now=now)
    node.refresh_from_db()
    assert node.quarantined_at is None and len(node.infra_error_jobs) == 2
    assert ready_nodes(now=now).filter(pk=node.pk).exists()

    _fail_jobs(identity, 1, now=now)
    node.refresh_from_db()
    assert node.quarantined_at == now and node.quarantine_reason.startswith("infra_errors:")
    assert _audits(node, "quarantine") == ["system"]
    since = NodeAudit.objects.get(node_id=node.pk, action="quarantine").after["since"]
    assert since.endswith("Z") and parse_datetime(since) == now, "UTC written as the API writes every time"
    assert not ready_nodes(now=now).filter(pk=node.pk).exists()
    # No judge job for it, though one is due.
    assert claim(identity, free_slots=4, now=now + timedelta(minutes=5)) == []


def test_the_heartbeat_tells_the_node_it_is_quarantined_since_when_and_why(student, problem, node_a,
                                                                          quarantine_settings):
    """A quarantined node gets no judge job; its owner, reading its agent's log, learns why
    from the heartbeat's answer (an addition to the contract), and when it ends."""
    from tests.api.helpers import heartbeat_body, node_client, send

    node, identity = node_a
    client = node_client(node, session=identity.session_epoch)

    def beat():
        answer = send(client, "POST", "/api/v1/internal/judgers/heartbeat", heartbeat_body())
        assert answer.status_code == 200
        return answer.json()["quarantine"]

    assert beat() is None
    now = timezone.now()
    for _ in range(3):
        submit(student, problem, now=now)
    _fail_jobs(identity, 3, now=now)
    quarantine = beat()
    assert quarantine["reason"].startswith("infra_errors:") and parse_datetime(quarantine["since"]) == now
    JudgeNode.objects.filter(pk=node.pk).update(quarantined_at=None, quarantine_reason="")
    assert beat() is None


def test_the_attempts_a_quarantined_node_burned_are_refunded(student, problem, node_a, quarantine_settings):
    node, identity = node_a
    now = timezone.now()
    for _ in range(3):
        submit(student, problem, now=now)
    # The last job was already on its last attempt: the node's error must not fail it.
    last = JudgeJob.objects.order_by("-id").first()
    JudgeJob.objects.filter(pk=last.pk).update(attempts=2)
    statuses = [status for _, status in _fail_jobs(identity, 3, now=now)]
    assert statuses == ["requeued"] * 3
    jobs = JudgeJob.objects.order_by("id")
    assert [(j.state, j.attempts) for j in jobs] == [(JobState.QUEUED, 0), (JobState.QUEUED, 0),
                                                      (JobState.QUEUED, 2)]


def test_an_error_from_an_already_quarantined_node_counts_no_attempt(student, problem, node_a, quarantine_settings):
    node, identity = node_a
    now = timezone.now()
    submit(student, problem, now=now)
    [job] = claim(identity, now=now)
    JudgeNode.objects.filter(pk=node.pk).update(quarantined_at=now, quarantine_reason="stalled: test")
    JudgeJob.objects.filter(pk=job.pk).update(attempts=3)
    assert settle(identity, infra_error(job), now=now) == "requeued"
    assert JudgeJob.objects.get(pk=job.pk).attempts == 2


def test_a_node_that_is_not_quarantined_still_fails_a_job_at_the_attempt_limit(student, problem, node_a,
                                                                              quarantine_settings):
    _, identity = node_a
    now = timezone.now()
    submit(student, problem, now=now)
    [job] = claim(identity, now=now)
    JudgeJob.objects.filter(pk=job.pk).update(attempts=3)
    assert settle(identity, infra_error(job), now=now) == "failed"


def test_a_judgement_ends_the_run_of_errors(student, problem, node_a, quarantine_settings):
    node, identity = node_a
    now = timezone.now()
    for _ in range(5):
        submit(student, problem, now=now)
    _fail_jobs(identity, 2, now=now)
    [good] = claim(identity, now=now)
    assert settle(identity, judged(good), now=now) == "settled"
    node.refresh_from_db()
    assert node.infra_error_jobs == []
    _fail_jobs(identity, 2, now=now)
    node.refresh_from_db()
    assert node.quarantined_at is None


def test_the_same_job_failing_again_is_not_a_second_job(student, problem, node_a, quarantine_settings):
    node, identity = node_a
    now = timezone.now()
    submit(student, problem, now=now)
    for attempt in range(2):
        later = now + timedelta(minutes=attempt * 5)
        [job] = claim(identity, now=later)
        settle(identity, infra_error(job), now=later)
    node.refresh_from_db()
    assert node.quarantined_at is None and node.infra_error_jobs == [job.pk]


def test_a_job_a_node_failed_goes_to_another_node(student, problem, node_a, node_b, quarantine_settings):
    _, identity_a = node_a
    node_b_row, identity_b = node_b
    now = timezone.now()
    submit(student, problem, now=now)
    [job] = claim(identity_a, now=now)
    settle(identity_a, infra_error(job), now=now)
    due = JudgeJob.objects.get(pk=job.pk).available_at
    # Due again: the node that failed it passes it by, the other one takes it.
    assert claim(identity_a, now=due) == []
    [again] = claim(identity_b, now=due)
    assert again.pk == job.pk and again.node_id == node_b_row.pk


def test_a_job_a_node_failed_comes_back_to_it_when_no_other_node_takes_it(student, problem, node_a, node_b,
                                                                          quarantine_settings):
    _, identity = node_a
    now = timezone.now()
    submit(student, problem, now=now)
    [job] = claim(identity, now=now)
    settle(identity, infra_error(job), now=now)
    due = JudgeJob.objects.get(pk=job.pk).available_at
    wait = timedelta(milliseconds=quarantine_settings.KECE_CLAIM_WAIT_MS)
    assert claim(identity, now=due + wait - timedelta(milliseconds=1)) == []
    assert [j.pk for j in claim(identity, now=due + wait)] == [job.pk]


def _stalled_node(student, problem, *, now):
    node, identity = make_node(pool="python", now=now - timedelta(minutes=5))
    JudgeNode.objects.filter(pk=node.pk).update(updated_at=now - timedelta(minutes=5), last_heartbeat_at=now)
    JudgeHostGroup.objects.filter(pk=node.host_group_id).update(updated_at=now - timedelta(minutes=5))
    submit(student, problem, now=now - timedelta(minutes=2))
    return node, identity


def test_a_node_with_free_slots_that_claims_nothing_while_work_waits_is_quarantined(student, problem,
                                                                                   quarantine_settings):
    now = timezone.now()
    node, _ = _stalled_node(student, problem, now=now)
    assert nodes_quarantine_stalled(now=now) == [node.pk]
    node.refresh_from_db()
    assert node.quarantine_reason.startswith("stalled:") and _audits(node, "quarantine") == ["system"]


def test_a_node_that_leased_lately_or_is_full_has_not_stalled(student, problem, quarantine_settings):
    now = timezone.now()
    node, identity = _stalled_node(student, problem, now=now)
    submit(student, problem, now=now - timedelta(minutes=2))
    claim(identity, now=now - timedelta(seconds=10))  # leased one ten seconds ago
    assert nodes_quarantine_stalled(now=now) == []
    JudgeJob.objects.filter(node_id=node.pk).update(started_at=now - timedelta(minutes=3))
    JudgeNode.objects.filter(pk=node.pk).update(running_reported=node.local_slots)  # full by its report
    assert nodes_quarantine_stalled(now=now) == []
    JudgeNode.objects.filter(pk=node.pk).update(running_reported=0)
    assert nodes_quarantine_stalled(now=now) == [node.pk]


def test_no_due_work_is_no_stall(student, problem, quarantine_settings):
    now = timezone.now()
    node, _ = make_node(pool="python", now=now)
    JudgeNode.objects.filter(pk=node.pk).update(updated_at=now - timedelta(minutes=5))
    submit(student, problem, now=now - timedelta(seconds=30))  # due, but not for a whole minute
    assert nodes_quarantine_stalled(now=now) == []


def test_renew_batches_that_all_come_back_lost_quarantine_the_node(student, problem, node_a, quarantine_settings):
    node, identity = node_a
    now = timezone.now()
    submit(student, problem, now=now)
    [job] = claim(identity, now=now)
    lost = [RenewItem(job.pk, job.lease_epoch + 7), RenewItem(999999, 1)]
    for _ in range(2):
        lease_renew(identity=identity, items=lost, now=now)
    # One batch with a live lease in it ends the count.
    lease_renew(identity=identity, items=[RenewItem(job.pk, job.lease_epoch)], now=now)
    node.refresh_from_db()
    assert node.renew_lost_batches == 0
    _renew_until_quarantined(node, identity, lost, 3, now=now)


def test_renewals_that_cross_the_nodes_own_result_posts_are_not_lost_leases(student, problem, node_a,
                                                                           quarantine_settings):
    """The agent renews a job until its result post is answered; when the result gets there
    first, the renew finds the lease settled. A one-slot node judging short jobs may see
    that batch after batch: it is not a node whose leases get lost."""
    node, identity = node_a
    now = timezone.now()
    for _ in range(4):
        submit(student, problem, now=now)
    lost = [RenewItem(999999, 1)]
    lease_renew(identity=identity, items=lost, now=now)  # one lost batch: the count is 1
    for _ in range(3):
        [job] = claim(identity, free_slots=1, now=now)
        assert settle(identity, judged(job), now=now) == "settled"
        [answer] = lease_renew(identity=identity, items=[RenewItem(job.pk, job.lease_epoch)], now=now)
        assert answer == {"jobId": job.pk, "ok": False, "error": "lease_lost"}
    node.refresh_from_db()
    assert node.quarantined_at is None
    # Those batches neither raised the count nor ended it: two more lost ones quarantine.
    assert node.renew_lost_batches == 1
    _renew_until_quarantined(node, identity, lost, 2, now=now)


def test_a_lease_lost_after_the_node_settled_an_earlier_lease_of_the_job_still_counts(student, problem, node_a,
                                                                                    quarantine_settings):
    """Only the lease the node's result settled is excused, not a later lease of the same job."""
    node, identity = node_a
    now = timezone.now()
    submit(student, problem, now=now)
    [(job, status)] = _fail_jobs(identity, 1, now=now)
    assert status == "requeued"
    later = now + timedelta(minutes=10)
    [again] = claim(identity, now=later)
    assert (again.pk, again.lease_epoch) == (job.pk, job.lease_epoch + 1)
    expired = later + timedelta(minutes=10)
    assert jobs_reap_expired(now=expired).requeued == [job.pk]
    batches = _renew_until_quarantined(node, identity, [RenewItem(again.pk, again.lease_epoch)], 3, now=expired)
    assert all(answer["error"] == "lease_lost" for [answer] in batches)


def test_a_passing_check_ends_the_quarantine_and_a_failing_one_does_not(student, problem, node_a, admin_user):
    node, identity = node_a
    now = timezone.now()
    JudgeNode.objects.filter(pk=node.pk).update(quarantined_at=now, quarantine_reason="stalled: test", max_slots=20)
    for judges_honestly in (False, True):
        check = node_check_start(node_id=node.pk, actor=admin_user, now=now)
        node.refresh_from_db()
        _queue_self_check(check, node, items=[], now=now)
        jobs = claim(identity, free_slots=20, now=now)  # a quarantined node still gets its own diagnostic jobs
        assert jobs and all(j.kind == "DIAGNOSTIC" for j in jobs)
        for job in jobs:
            verdict = job.snapshot["canary"]["expect"] if judges_honestly else "AC"
            settle(identity, SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch, outcome="JUDGED",
                                           verdict=verdict, checks=PASSING_ITEMS), now=now)
        node.refresh_from_db()
        assert (node.quarantined_at is None) is judges_honestly
    assert _audits(node, "quarantine_cleared") == ["system"]
    submit(student, problem, now=now)
    assert len(claim(identity, now=now)) == 1


def test_a_check_does_not_lift_a_quarantine_that_began_while_it_ran(node_a, admin_user):
    """Started on a sound node, it passes; meanwhile a canary quarantined the node: that
    quarantine is for a check started after it, not lifted by no one's action."""
    node, identity = node_a
    now = timezone.now()
    JudgeNode.objects.filter(pk=node.pk).update(max_slots=20)
    check = node_check_start(node_id=node.pk, actor=admin_user, now=now)
    node.refresh_from_db()
    _queue_self_check(check, node, items=[], now=now)
    JudgeNode.objects.filter(pk=node.pk).update(quarantined_at=now + timedelta(seconds=5),
                                                quarantine_reason="canary_mismatch: test")
    for job in claim(identity, free_slots=20, now=now + timedelta(seconds=6)):
        settle(identity, SettleRequest(job_id=job.pk, lease_epoch=job.lease_epoch, outcome="JUDGED",
                                       verdict=job.snapshot["canary"]["expect"], checks=PASSING_ITEMS),
               now=now + timedelta(seconds=10))
    node.refresh_from_db()
    assert node.self_check_status == "PASSED" and node.quarantine_reason == "canary_mismatch: test"
    assert _audits(node, "quarantine_cleared") == []


@pytest.mark.parametrize("away", ["silent", "unhealthy", "group_disabled"])
def test_a_node_that_could_not_claim_is_not_stalled_the_moment_it_can(student, problem, quarantine_settings, away):
    """After an outage (no heartbeat), ill health, or its host group disabled for a while with
    work waiting: its first heartbeat, or the group enabled again, starts the stall rule's
    minute afresh. Else every node of the pool would be quarantined as it came back."""
    from judging.services.claim import job_claim
    from nodes.models import HostGroupStatus
    from nodes.services import AgentReport, HeartbeatReport, host_group_update, node_heartbeat

    now = timezone.now()
    node, identity = _stalled_node(student, problem, now=now)

    def beat(at, *, healthy=True):
        node_heartbeat(node_id=node.pk, credential_digest_value=identity.credential_digest,
                       session_epoch=identity.session_epoch, now=at,
                       beat=HeartbeatReport(AgentReport(node.agent_version, node.runtime_spec, node.local_slots),
                                            running=0, health_ok=healthy, health_checks={}))

    if away == "silent":
        JudgeNode.objects.filter(pk=node.pk).update(last_heartbeat_at=now - timedelta(minutes=3))
        assert job_claim(identity=identity, free_slots=1, now=now).reason == "stale_heartbeat"
        beat(now)
    elif away == "unhealthy":
        JudgeNode.objects.filter(pk=node.pk).update(health_ok=False)
        assert job_claim(identity=identity, free_slots=1, now=now).reason == "not_ready"
        beat(now)
    else:
        JudgeHostGroup.objects.filter(pk=node.host_group_id).update(status=HostGroupStatus.DISABLED)
        assert job_claim(identity=identity, free_slots=1, now=now).reason == "not_ready"
        group = JudgeHostGroup.objects.get(pk=node.host_group_id)
        host_group_update(group_id=group.pk, revision=group.revision, changes={"status": HostGroupStatus.ACTIVE},
                          actor=None)
    assert nodes_quarantine_stalled(now=now + timedelta(seconds=5)) == [], "quarantined as it came back"
    # A heartbeat of a node that was ready all along changes nothing: a real stall still counts.
    JudgeNode.objects.filter(pk=node.pk).update(updated_at=now - timedelta(minutes=5))
    JudgeHostGroup.objects.filter(pk=node.host_group_id).update(updated_at=now - timedelta(minutes=5))
    beat(now + timedelta(seconds=10))
    assert nodes_quarantine_stalled(now=now + timedelta(seconds=10)) == [node.pk]
