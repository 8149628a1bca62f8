"""Cross-checks: a sampled verdict judged again, hidden, on another node of the pool; the
student's result never moves; disagreements are recorded, shown, and quarantine a node
that has too many of them; a failed canary settles a disagreement against the liar."""

from datetime import timedelta

import pytest
from django.utils import timezone

from judging.models import JudgeJob, SettlementEvent, Submission
from kece.periodic import integrity_step
from nodes.models import CrossCheck, HiddenCanary, JudgeNode
from tests.api.helpers import make_admin, session_client
from tests.factories import make_node
from tests.judging.helpers import claim, judged, settle, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db]


@pytest.fixture
def cross_checks_on(settings):
    settings.KECE_CROSS_CHECK_RATE = 1  # every verdict: the sampling is not what is tested here
    settings.KECE_CROSS_CHECK_QUARANTINE_AFTER = 2
    settings.KECE_CANARY_RATE = 0
    settings.KECE_CANARY_MIN_INTERVAL_S = 0
    return settings


def _judged_by(identity, student, problem, *, verdict, now):
    """A student's submission, judged by this node with `verdict`; returns its job."""
    submission = submit(student, problem, now=now)
    [job] = claim(identity, now=now)
    assert job.submission_id == submission.pk
    settle(identity, judged(job, verdict=verdict), now=now)
    return job


def _check_job(record):
    record.refresh_from_db()
    return JudgeJob.objects.get(pk=record.check_job_id)


def test_a_sampled_verdict_is_judged_again_by_a_peer_and_never_by_its_own_node(
        student, problem, node_a, node_b, cross_checks_on):
    (_, identity_a), (node_b_row, identity_b) = node_a, node_b
    now = timezone.now()
    original = _judged_by(identity_a, student, problem, verdict="WA", now=now)
    record = CrossCheck.objects.get(original_job_id=original.pk)
    integrity_step(now=now)
    check = _check_job(record)
    assert record.check_node_id == node_b_row.pk
    # The node that judged the original is never given its check.
    assert claim(identity_a, now=now) == []
    [leased] = claim(identity_b, now=now)
    assert leased.pk == check.pk
    assert (leased.kind, leased.manifest_id, leased.snapshot["source"]["digest"]) == (
        "JUDGE", original.manifest_id, original.snapshot["source"]["digest"])
    assert leased.submission_id != original.submission_id

    settle(identity_b, judged(leased, verdict="AC"), now=now)
    integrity_step(now=now)
    record.refresh_from_db()
    assert (record.original_verdict, record.check_verdict, record.agreed, record.settled_at) == ("WA", "AC", False, now)
    # The student's result is the original's, and only the original wrote events.
    student_submission = Submission.objects.get(pk=original.submission_id)
    assert (student_submission.verdict, student_submission.current_judge_job_id) == ("WA", original.pk)
    assert not SettlementEvent.objects.filter(job_id=check.pk).exists()
    assert CrossCheck.objects.count() == 1  # a check's own verdict is not sampled again

    # Shown on both nodes' console pages.
    page = session_client(make_admin()).get(f"/admin/judgers/{node_b_row.pk}").content.decode()
    assert "Recent disagreements with peers" in page
    assert f"job {original.pk}: WA (0 points)" in page and "AC (100 points)" in page


def test_agreeing_nodes_record_an_agreement_and_nothing_else(student, problem, node_a, node_b, cross_checks_on):
    (node_a_row, identity_a), (node_b_row, identity_b) = node_a, node_b
    now = timezone.now()
    for _ in range(3):
        original = _judged_by(identity_a, student, problem, verdict="AC", now=now)
        integrity_step(now=now)
        [leased] = claim(identity_b, now=now)
        settle(identity_b, judged(leased, verdict="AC"), now=now)
        integrity_step(now=now)
        assert CrossCheck.objects.get(original_job_id=original.pk).agreed is True
    assert not JudgeNode.objects.filter(quarantined_at__isnull=False).exists()


def test_a_node_that_disagrees_with_its_peers_k_times_is_quarantined_and_they_are_not(
        student, problem, node_a, node_b, cross_checks_on):
    """A liar's originals are checked by two honest peers in turn: each disagreement
    counts against both nodes of it, so the liar reaches K first."""
    (liar, identity_liar), (peer_b, identity_b) = node_a, node_b
    peer_c, identity_c = make_node(pool="python", name="node-c")
    now = timezone.now()
    for peer_identity in (identity_b, identity_c):
        original = _judged_by(identity_liar, student, problem, verdict="AC", now=now)
        record = CrossCheck.objects.get(original_job_id=original.pk)
        integrity_step(now=now)
        record.refresh_from_db()
        checker = identity_b if record.check_node_id == peer_b.pk else identity_c
        [leased] = claim(checker, now=now)
        settle(checker, judged(leased, verdict="WA"), now=now)
        integrity_step(now=now)
    liar.refresh_from_db()
    assert liar.quarantine_reason.startswith("cross_check: disagreed with its peers on 2 verdicts")
    quarantined = set(JudgeNode.objects.filter(quarantined_at__isnull=False).values_list("pk", flat=True))
    # Each peer disagreed once, unless the random peer was the same one twice: then it has
    # two, like the liar, and the server cannot tell them apart (see nodes.cross_checks).
    checkers = list(CrossCheck.objects.values_list("check_node_id", flat=True))
    expected = {liar.pk} | ({checkers[0]} if checkers[0] == checkers[1] else set())
    assert quarantined == expected


def test_a_failed_canary_settles_a_disagreement_against_the_liar(student, problem, node_a, node_b, cross_checks_on):
    (liar, identity_liar), (peer, identity_peer) = node_a, node_b
    now = timezone.now()
    # Both passed their self-check a minute ago: no canary is due by time or count.
    JudgeNode.objects.update(self_check_finished_at=now - timedelta(minutes=1))
    # Two of the liar's verdicts are chosen and their checks queued for the peer.
    originals = [_judged_by(identity_liar, student, problem, verdict="AC", now=now) for _ in range(2)]
    integrity_step(now=now)
    first, second = (CrossCheck.objects.get(original_job_id=j.pk) for j in originals)
    [leased] = claim(identity_peer, now=now)
    settle(identity_peer, judged(leased, verdict="WA"), now=now)
    cross_checks_on.KECE_CANARY_MIN_INTERVAL_S = 3600  # canaries on
    integrity_step(now=now)
    # The disagreement makes a canary due for both nodes at the next pass.
    canaries = {c.node_id: c for c in HiddenCanary.objects.all()}
    assert set(canaries) == {liar.pk, peer.pk}
    [canary_job] = claim(identity_liar, now=now)
    settle(identity_liar, judged(canary_job, verdict="AC" if canaries[liar.pk].expect != "AC" else "WA"), now=now)
    integrity_step(now=now)
    liar.refresh_from_db()
    assert liar.quarantine_reason.startswith("canary_mismatch:")
    first.refresh_from_db()
    assert first.blamed_node_id == liar.pk

    # The second check still disagrees with the liar; it is the peer's second disagreement,
    # but the first no longer counts against it.
    leased = next(j for j in claim(identity_peer, free_slots=2, now=now) if j.pk == _check_job(second).pk)
    settle(identity_peer, judged(leased, verdict="WA"), now=now)
    integrity_step(now=now)
    second.refresh_from_db()
    peer.refresh_from_db()
    assert second.agreed is False and peer.quarantined_at is None


def test_a_verdict_whose_details_were_pruned_meanwhile_is_given_up_not_checked(
        student, problem, node_a, node_b, cross_checks_on):
    """The integrity step did not run for days, and retention slimmed the original's
    snapshot: a check from what is left would disagree with it and count against both."""
    _, identity_a = node_a
    now = timezone.now()
    original = _judged_by(identity_a, student, problem, verdict="AC", now=now)
    record = CrossCheck.objects.get(original_job_id=original.pk)
    JudgeJob.objects.filter(pk=original.pk).update(details_pruned_at=now)
    integrity_step(now=now)
    record.refresh_from_db()
    assert (record.check_job_id, record.agreed, record.settled_at) == (None, None, now)
    assert not JudgeJob.objects.filter(bound_node__isnull=False).exists()


def test_with_no_other_node_in_the_pool_a_chosen_verdict_waits_then_is_given_up(
        student, problem, node_a, foreign_node, cross_checks_on):
    _, identity = node_a
    now = timezone.now()
    original = _judged_by(identity, student, problem, verdict="AC", now=now)
    record = CrossCheck.objects.get(original_job_id=original.pk)
    integrity_step(now=now)
    record.refresh_from_db()
    # Neither the node that judged it nor a node of another pool checks it.
    assert (record.check_job_id, record.settled_at) == (None, None)
    integrity_step(now=now + timedelta(hours=1))
    record.refresh_from_db()
    assert (record.check_job_id, record.agreed, record.settled_at) == (None, None, now + timedelta(hours=1))
    assert not JudgeJob.objects.filter(bound_node__isnull=False).exists()
