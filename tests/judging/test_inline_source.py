"""A claim that asks for its jobs' sources (`inlineSource`) gets each job's submitted code,
and only code whose bytes are the ones the job's digest names. The codes are read with the
leases' COMMIT: if that read fails, nothing is leased and the jobs wait for the next claim;
codes read after a commit that cannot be read leave the leases as they are."""

import pytest
from django.db import DatabaseError
from django.utils import timezone

from judging.api.claim import claim_payload
from judging.selectors import job_payloads
from judging.services.claim import job_claim
from judging.models import JobState, JudgeJob, Submission
from tests.judging.helpers import submit


def test_each_job_carries_its_own_code(student, problem, node_a):
    _, identity = node_a
    codes = {submit(student, problem, code=f"print({n})").pk: f"print({n})" for n in range(2)}
    jobs, _, _ = claim_payload(identity, 2, inline_source=True)
    assert {job["submissionId"]: job["sourceText"] for job in jobs} == codes


def test_one_answer_carries_sources_up_to_its_budget_as_sent_and_the_rest_are_downloaded(student, problem, node_a,
                                                                                       monkeypatch):
    import judging.selectors

    _, identity = node_a
    # 15 bytes of UTF-8, 23 once escaped in the answer ("print('\u4f60\u597d')" with its quotes).
    for code in ("print(1)", "print('你好')"):
        submit(student, problem, code=code)
    monkeypatch.setattr(judging.selectors, "INLINE_SOURCES_MAX_BYTES", 10 + 20)
    jobs, _, _ = claim_payload(identity, 2, inline_source=True)
    # The first fits (10 bytes with its quotes); the second does not fit in what is left as
    # sent, though its UTF-8 bytes would, and is downloaded.
    assert [job.get("sourceText") for job in jobs] == ["print(1)", None]


def test_code_that_no_longer_matches_its_digest_is_not_sent(student, problem, node_a):
    _, identity = node_a
    submission = submit(student, problem, code="print(1)")
    Submission.objects.filter(pk=submission.pk).update(code="print(2)")
    [job], _, _ = claim_payload(identity, 1, inline_source=True)
    assert "sourceText" not in job and job["source"]["bytes"] == len("print(1)")


def test_codes_read_after_the_commit_that_cannot_be_read_leave_the_leases_to_go_out_without_them(
        student, problem, node_a, monkeypatch):
    import judging.selectors

    _, identity = node_a
    submit(student, problem)
    now = timezone.now()
    [leased] = job_claim(identity=identity, free_slots=1, now=now).jobs

    def unreadable(jobs):
        raise DatabaseError("lost connection")

    monkeypatch.setattr(judging.selectors, "submitted_sources", unreadable)
    [job] = job_payloads([leased], now=now, inline_source=True)
    assert "sourceText" not in job
    assert JudgeJob.objects.get(pk=job["jobId"]).state == JobState.RUNNING


@pytest.mark.django_db(transaction=True)
def test_a_claim_whose_codes_cannot_be_read_with_its_commit_leases_nothing(student, problem, node_a, monkeypatch):
    import judging.selectors

    _, identity = node_a
    queued = submit(student, problem).current_judge_job_id
    reads = judging.selectors._source_reads

    def failing(jobs):
        return [(pairs, shape, sql.replace("SELECT", "SELECT no_such_column,", 1), ids)
                for pairs, shape, sql, ids in reads(jobs)]

    monkeypatch.setattr(judging.selectors, "_source_reads", failing)
    with pytest.raises(DatabaseError):
        claim_payload(identity, 1, inline_source=True)
    assert JudgeJob.objects.get(pk=queued).state == JobState.QUEUED
    monkeypatch.setattr(judging.selectors, "_source_reads", reads)
    [job], _, _ = claim_payload(identity, 1, inline_source=True)
    assert job["jobId"] == queued and job["sourceText"] == "print(1)"
