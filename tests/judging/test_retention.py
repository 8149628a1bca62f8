"""Retention: each kind goes past its age and stays before it, a batch at a time; a dry run
changes nothing; a file some manifest or active job names, or stored within the grace, stays,
even against a store racing the sweep; an exam's result, a rejudge and a student's history
read the same after a run as before."""

import os
import re
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from judging import artifacts
from judging.models import (
    EventState, JobAttempt, JudgeJob, Manifest, ProblemResult, ReconcileReport, SettlementEvent, Submission,
)
from judging.selectors import artifact_for_lease
from judging.services import retention
from judging.services.events import events_dispatch
from judging.services.exams import exam_hand_in, exam_publish
from judging.services.reconcile import reconcile_check, reconcile_run
from judging.services.rejudge import submission_rejudge
from judging.services.retention import Policy, gc_run
from judging.services.snapshot import snapshot_digests
from nodes.models import NodeAudit, NodeCheck
from tests.api.helpers import ADMIN, make_admin, session_client, token_client
from tests.concurrency import raise_first_error, run_concurrently
from tests.factories import UserFactory, make_exam, make_problem
from tests.judging.test_clock import skewed  # noqa: F401 - the fixture
from tests.judging.helpers import claim, infra_error, judged, settle, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.django_db]

DAY = timedelta(days=1)
POLICY = Policy(job_details=90 * DAY, events=30 * DAY, audit=365 * DAY, blob_grace=timedelta(hours=24), batch=50,
                batches=None)


@pytest.fixture
def store(settings, tmp_path):
    """A content store of the test's own: a sweep sees no other test's files."""
    settings.KECE_ARTIFACT_ROOT = str(tmp_path / "store")
    return tmp_path / "store"


@pytest.fixture
def algo(store):
    return make_problem(languages=("python",), cases=3)


def _dispatch():
    while events_dispatch(now=timezone.now()).applied:
        pass


def _fetch(identity, job, digest):
    """What a node downloading `digest` under its lease gets: the file's path, or the source's
    bytes (read from its row: a source is never in the store)."""
    return artifact_for_lease(identity=identity, job_id=job.pk, lease_epoch=job.lease_epoch, digest=digest,
                              now=timezone.now())


def _judged(user, problem, identity, *, verdict="AC", lost_lease=False, **submit_args):
    """A submission judged by the node, its source downloaded as a node does, its events
    applied; `lost_lease`: its first lease ended in an infrastructure error first."""
    submission = submit(user, problem, **submit_args)
    [job] = claim(identity)
    if lost_lease:
        settle(identity, infra_error(job))
        JudgeJob.objects.filter(pk=job.pk).update(available_at=timezone.now(), claim_key=timezone.now())
        [job] = claim(identity)
    _fetch(identity, job, job.snapshot["source"]["digest"])
    assert settle(identity, judged(job, verdict=verdict)) == "settled"
    _dispatch()
    return submission, JudgeJob.objects.get(pk=job.pk)


def _age(path, by: timedelta):
    then = time.time() - by.total_seconds()
    os.utime(path, (then, then))


def _reports(reports) -> dict:
    return {r.kind: (r.count, r.bytes) for r in reports}


# --- finished jobs' details ---------------------------------------------------------------------

def test_a_finished_job_keeps_its_details_until_the_age_and_then_only_its_judgement(algo, node_a):
    _, identity = node_a
    submission, job = _judged(UserFactory(), algo, identity, lost_lease=True)
    waiting = submit(UserFactory(), algo)  # queued, never finished: nothing of it goes
    before = JudgeJob.objects.get(pk=job.pk)
    assert JobAttempt.objects.get(job_id=job.pk).message == "the sandbox died"

    early = retention.job_details_prune(now=job.finished_at + 89 * DAY, policy=POLICY)
    assert early.count == 0 and JudgeJob.objects.get(pk=job.pk).result == before.result

    late = retention.job_details_prune(now=job.finished_at + 91 * DAY, policy=POLICY)
    assert (late.count, late.sample) == (1, [job.pk]) and late.bytes > 0
    after = JudgeJob.objects.get(pk=job.pk)
    assert after.result == {"outcome": "JUDGED", "verdict": "AC", "score": 100, "timeMs": 10, "memoryKb": 1024}
    assert "cases" not in after.snapshot and "sql" not in after.snapshot
    assert after.snapshot["manifestId"] == job.manifest_id and after.snapshot["source"] == before.snapshot["source"]
    assert (after.state, after.settled_lease_epoch, after.settled_node_id, after.finished_at, after.updated_at) == (
        before.state, before.settled_lease_epoch, before.settled_node_id, before.finished_at, before.updated_at)
    attempt = JobAttempt.objects.get(job_id=job.pk)
    assert (attempt.error, attempt.message) == ("sandbox_crashed", ""), "the row stays, the node's text goes"
    shown = Submission.objects.get(pk=submission.pk)
    assert (shown.verdict, shown.score, len(shown.cases)) == ("AC", 100, 3), "the submission keeps its own result"
    assert JudgeJob.objects.get(submission_id=waiting.pk).snapshot["cases"], "an active job keeps everything"

    again = retention.job_details_prune(now=job.finished_at + 92 * DAY, policy=POLICY)
    assert again.count == 0, "a pruned job is not taken twice"


def test_a_job_judged_before_provenance_was_recorded_keeps_the_digest_of_its_test_data(algo, node_a):
    _, identity = node_a
    submission, job = _judged(UserFactory(), algo, identity)
    JudgeJob.objects.filter(pk=job.pk).update(settled_manifest_digest="")  # as settled before the column
    admin = token_client(make_admin())
    before = admin.get(ADMIN + f"submissions/ALGO/{submission.pk}").json()["jobs"][0]["provenance"]
    assert retention.job_details_prune(now=job.finished_at + 91 * DAY, policy=POLICY).count == 1
    assert "cases" not in JudgeJob.objects.get(pk=job.pk).snapshot
    after = admin.get(ADMIN + f"submissions/ALGO/{submission.pk}").json()["jobs"][0]["provenance"]
    assert after == before and len(after["manifestDigest"]) == 64


def test_job_details_go_a_batch_at_a_time_within_a_bounded_run(algo, node_a):
    _, identity = node_a
    jobs = [_judged(UserFactory(), algo, identity)[1] for _ in range(5)]
    later = max(j.finished_at for j in jobs) + 91 * DAY
    bounded = Policy(job_details=90 * DAY, batch=2, batches=2)
    with CaptureQueriesContext(connection) as queries:
        first = retention.job_details_prune(now=later, policy=bounded)
    assert (first.count, first.more) == (4, True)
    assert sum("FOR UPDATE" in q["sql"] for q in queries.captured_queries) == 2, "each batch locks its own"
    second = retention.job_details_prune(now=later, policy=bounded)
    assert (second.count, second.more) == (1, False)
    assert not JudgeJob.objects.filter(details_pruned_at__isnull=True).exists()


# --- delivered events -----------------------------------------------------------------------

def test_delivered_events_go_past_the_age_and_pending_and_dead_ones_stay(algo, node_a, settings):
    _, identity = node_a
    _, delivered = _judged(UserFactory(), algo, identity)
    _, dead = _judged(UserFactory(), algo, identity)
    SettlementEvent.objects.filter(job_id=dead.pk).update(state=EventState.DEAD)
    submit(UserFactory(), algo)
    [pending] = claim(identity)
    settle(identity, judged(pending))  # not dispatched yet
    applied = SettlementEvent.objects.get(job_id=delivered.pk).applied_at

    assert retention.events_prune(now=applied + 29 * DAY, policy=POLICY).count == 0
    gone = retention.events_prune(now=applied + 31 * DAY, policy=POLICY)
    assert gone.count == 1 and gone.bytes > 0
    assert set(SettlementEvent.objects.values_list("job_id", flat=True)) == {dead.pk, pending.pk}
    assert ProblemResult.objects.count() == 2, "the rows the events derived stay"

    # Reconciliation does not take the job for one that never had its events.
    settings.KECE_GC_EVENTS_DAYS = 30
    later = applied + 31 * DAY
    assert reconcile_check(now=later)["settled_without_events"]["count"] == 0
    report = reconcile_run(now=later, repair=True)
    assert "settled_without_events" not in report.repaired
    assert not SettlementEvent.objects.filter(job_id=delivered.pk).exists()


def test_an_event_made_due_again_after_the_sweep_read_it_stays(algo, node_a, monkeypatch):
    _, identity = node_a
    _, job = _judged(UserFactory(), algo, identity)
    event = SettlementEvent.objects.get(job_id=job.pk)
    in_batches = retention._in_batches

    def made_due_meanwhile(kind, policy, *, candidates, take, dry_run):
        def late(batch):
            SettlementEvent.objects.filter(pk=event.pk).update(state=EventState.PENDING)  # reconciliation
            return take(batch)
        return in_batches(kind, policy, candidates=candidates, take=late, dry_run=dry_run)

    monkeypatch.setattr(retention, "_in_batches", made_due_meanwhile)
    report = retention.events_prune(now=event.applied_at + 31 * DAY, policy=POLICY)
    assert report.count == 0 and SettlementEvent.objects.filter(pk=event.pk).exists()


# --- audit --------------------------------------------------------------------------------------

def test_audit_rows_go_past_the_age_but_a_nodes_latest_check_a_running_one_and_the_last_report_stay(
        node_a, node_b):
    node, _ = node_a
    now = timezone.now()
    for action in ("register", "enable", "drain"):
        NodeAudit.objects.create(node=node, action=action)
    older = NodeCheck.objects.create(node=node, config_revision=1, status=NodeCheck.Status.FAILED, started_at=now)
    latest = NodeCheck.objects.create(node=node, config_revision=1, status=NodeCheck.Status.PASSED, started_at=now)
    running = NodeCheck.objects.create(node=node_b[0], config_revision=2, status=NodeCheck.Status.RUNNING,
                                       started_at=now - DAY)
    reports = [ReconcileReport.objects.create(created_at=now) for _ in range(3)]

    early = retention.audit_prune(now=now + 364 * DAY, policy=POLICY)
    assert sum(r.count for r in early) == 0
    late = {r.kind: r for r in retention.audit_prune(now=now + 366 * DAY, policy=POLICY)}
    assert (late["node_audit"].count, late["node_checks"].count, late["reconcile_reports"].count) == (3, 1, 2)
    assert not NodeAudit.objects.exists()
    assert set(NodeCheck.objects.values_list("pk", flat=True)) == {latest.pk, running.pk}
    assert older.pk < latest.pk
    assert list(ReconcileReport.objects.values_list("pk", flat=True)) == [reports[-1].pk]


def test_a_bounded_run_deletes_a_batch_per_statement_and_leaves_the_rest_for_the_next(node_a):
    node, _ = node_a
    for n in range(7):
        NodeAudit.objects.create(node=node, action=f"change-{n}")
    bounded = Policy(audit=DAY, batch=2, batches=2)
    later = timezone.now() + 2 * DAY
    with CaptureQueriesContext(connection) as queries:
        [first, *_] = retention.audit_prune(now=later, policy=bounded)
    deletes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("DELETE")]
    assert (first.count, first.more, len(deletes)) == (4, True, 2)
    assert NodeAudit.objects.count() == 3
    [second, *_] = retention.audit_prune(now=later, policy=bounded)
    assert (second.count, second.more) == (3, False) and not NodeAudit.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_runs_at_once_report_together_what_was_deleted(mariadb, node_a):
    node, _ = node_a
    NodeAudit.objects.bulk_create([NodeAudit(node=node, action=f"change-{n}") for n in range(600)])
    policy = Policy(audit=DAY, batch=20, batches=None)
    later = timezone.now() + 2 * DAY
    results = run_concurrently([lambda: retention.audit_prune(now=later, policy=policy)] * 2)
    raise_first_error(results)
    assert not NodeAudit.objects.exists()
    assert sum(report.count for run in results for report in run if report.kind == "node_audit") == 600


def test_sign_ins_past_their_expiry_go_and_live_ones_stay():
    from django.contrib.sessions.backends.db import SessionStore
    from django.contrib.sessions.models import Session

    stores = [SessionStore() for _ in range(5)]
    for store in stores:
        store["seen"] = True
        store.create()
    now = timezone.now()
    expired = [s.session_key for s in stores[:3]]
    Session.objects.filter(session_key__in=expired).update(expire_date=now - DAY)
    report = retention.sessions_prune(now=now, policy=Policy(batch=2, batches=None))
    assert report.count == 3 and report.bytes > 0
    assert set(Session.objects.values_list("session_key", flat=True)) == {s.session_key for s in stores[3:]}


# --- the content store ------------------------------------------------------------------------

def test_a_file_goes_only_if_nothing_names_it_and_it_is_older_than_the_grace(store, algo, node_a):
    _, identity = node_a
    manifest = algo.current_manifest
    named = artifacts.path_for(manifest.cases[0]["input"]["digest"])
    recent = artifacts.path_for(artifacts.store_bytes(b"uploaded a moment ago, not named yet")["digest"])
    forgotten = artifacts.path_for(artifacts.store_bytes(b"named by nothing for days")["digest"])
    submit(UserFactory(), algo, code="print('queued')")
    [running] = claim(identity)
    assert _fetch(identity, running, running.snapshot["source"]["digest"]) == b"print('queued')"
    crashed = forgotten.parent / ".incoming-leftover"
    crashed.write_bytes(b"half a file")
    for path in (named, forgotten, crashed):
        _age(path, 3 * DAY)

    report = retention.blobs_sweep(now=timezone.now(), policy=POLICY)
    assert (report.count, report.bytes) == (2, len(b"named by nothing for days") + len(b"half a file"))
    assert named.exists() and recent.exists()
    assert not forgotten.exists() and not crashed.exists()
    assert not list(store.rglob(".doomed-*")), "nothing is left aside"



def test_a_store_during_the_sweep_keeps_the_file_whichever_side_of_the_rename_it_falls(store, monkeypatch):
    data = {side: f"stored again {side} the sweep sets it aside".encode() for side in ("before", "after")}
    paths = {side: artifacts.path_for(artifacts.store_bytes(d)["digest"]) for side, d in data.items()}
    for path in paths.values():
        _age(path, 3 * DAY)
    set_aside = retention._set_aside

    def racing(path, digest):
        side = "before" if path == paths["before"] else "after"
        if side == "before":
            artifacts.store_bytes(data[side])
        aside = set_aside(path, digest)
        if side == "after":
            artifacts.store_bytes(data[side])
        return aside

    monkeypatch.setattr(retention, "_set_aside", racing)
    report = retention.blobs_sweep(now=timezone.now(), policy=POLICY)
    assert report.count == 1, "only the set-aside copy of the one stored after the rename went"
    for side, path in paths.items():
        assert path.read_bytes() == data[side], side
    assert not list(store.rglob(".doomed-*"))


@pytest.mark.django_db(transaction=True)
def test_a_file_stored_and_named_while_sweeps_run_is_never_lost(store, mariadb):
    problem = make_problem(languages=("python",), cases=1)
    for round_ in range(25):
        data = f"test data of version {round_ + 2}".encode()
        _age(artifacts.path_for(artifacts.store_bytes(data)["digest"]), 3 * DAY)  # left over, named by nothing

        def publish():
            entry = artifacts.store_bytes(data)
            case = {"ordinal": 1, "weight": 100, "input": entry, "output": entry}
            return Manifest.objects.create(problem=problem, version=round_ + 2, time_limit_ms=1000,
                                           memory_limit_mb=64, languages=["python"], cases=[case])

        results = run_concurrently([publish, lambda: retention.blobs_sweep(now=timezone.now(), policy=POLICY)])
        raise_first_error(results)
        assert artifacts.path_for(artifacts.sha256_hex(data)).read_bytes() == data, f"round {round_}"


# --- a dry run, the command, the periodic step ----------------------------------------------

def _old_work(algo, identity):
    """A judged job finished 100 days ago, its event applied 40 days ago, an audit row a
    year and a day old, and a file named by nothing for two days: a package never
    published."""
    submission, job = _judged(UserFactory(), algo, identity)
    long_ago = timezone.now() - 100 * DAY
    JudgeJob.objects.filter(pk=job.pk).update(finished_at=long_ago)
    SettlementEvent.objects.filter(job_id=job.pk).update(next_attempt_at=long_ago, applied_at=timezone.now() - 40 * DAY)
    NodeAudit.objects.create(action="register")
    NodeAudit.objects.filter(action="register").update(created_at=timezone.now() - 366 * DAY)
    stray = artifacts.path_for(artifacts.store_bytes(b"a package never published")["digest"])
    _age(stray, 2 * DAY)
    return submission, job, stray


def _state(store):
    return (list(JudgeJob.objects.order_by("pk").values_list("result", "snapshot", "details_pruned_at")),
            SettlementEvent.objects.count(), NodeAudit.objects.count(), ReconcileReport.objects.count(),
            sorted(p.name for p in store.rglob("*") if p.is_file()))


def test_a_dry_run_changes_nothing_and_foretells_the_run(store, algo, node_a):
    _, identity = node_a
    _old_work(algo, identity)
    before = _state(store)
    foretold = gc_run(now=timezone.now(), policy=POLICY, dry_run=True)
    assert _state(store) == before
    assert {k: n for k, (n, _) in _reports(foretold).items()} == {
        "job_details": 1, "events": 1, "node_audit": 1, "node_checks": 0, "reconcile_reports": 0, "sessions": 0,
        "blobs": 1}, "the stray file"
    assert _reports(gc_run(now=timezone.now(), policy=POLICY)) == _reports(foretold)
    assert _state(store) != before


def test_the_command_prints_what_would_go_then_takes_it(store, algo, node_a, settings):
    _, identity = node_a
    _, job, stray = _old_work(algo, identity)
    settings.KECE_GC_AUDIT_DAYS = 0  # kept forever
    out = StringIO()
    call_command("kece_gc", "--dry-run", stdout=out)
    printed = out.getvalue()
    assert "job_details: 1 would go" in printed and f"(e.g. {job.pk})" in printed
    assert "events: 1 would go" in printed and "node_audit: kept forever" in printed
    assert "blobs: 1 would go" in printed and stray.name in printed
    assert "dry run: nothing changed" in printed
    assert stray.exists() and SettlementEvent.objects.filter(job_id=job.pk).exists()

    out = StringIO()
    call_command("kece_gc", stdout=out)
    assert "job_details: 1 gone" in out.getvalue() and not stray.exists()
    assert JudgeJob.objects.get(pk=job.pk).details_pruned_at is not None
    assert NodeAudit.objects.count() == 1


def test_the_command_says_how_far_a_long_run_has_got(node_a, settings, monkeypatch):
    from judging.management.commands import kece_gc

    node, _ = node_a
    NodeAudit.objects.bulk_create([NodeAudit(node=node, action=f"change-{n}") for n in range(35)])
    NodeAudit.objects.update(created_at=timezone.now() - 400 * DAY)
    settings.KECE_GC_BATCH = 10
    monkeypatch.setattr(kece_gc, "PROGRESS_S", 0.0)  # a line after every batch, not every few seconds
    out, err = StringIO(), StringIO()
    call_command("kece_gc", stdout=out, stderr=err)
    progress = [line for line in err.getvalue().splitlines() if line.startswith("node_audit:")]
    assert progress[:3] == ["node_audit: 10 gone so far …", "node_audit: 20 gone so far …",
                            "node_audit: 30 gone so far …"]
    assert "node_audit: 35 gone" in out.getvalue()


@pytest.mark.django_db(transaction=True)  # run_guarded closes the connection, as a worker's task does
def test_the_periodic_step_runs_a_bounded_pass_and_records_its_success(store, algo, node_a, settings):
    from kece import periodic, tasks

    _, identity = node_a
    _, job, stray = _old_work(algo, identity)
    settings.KECE_GC_BATCHES = 1
    assert periodic.last_success("gc") is None
    tasks.gc()
    assert periodic.last_success("gc") is not None
    assert JudgeJob.objects.get(pk=job.pk).details_pruned_at is not None and not stray.exists()


# --- what an exam, a rejudge and a student's history need ------------------------------------

def test_an_exam_result_a_rejudge_and_a_students_history_read_the_same_after_a_run(store, algo, node_a):
    _, identity = node_a
    student = UserFactory()
    exam = make_exam(algo, mode="OI", participants=[student], points={0: 40})
    submission = submit(student, algo, exam_id=exam.pk, code="print('my answer')")
    exam_hand_in(exam_id=exam.pk, user=student, now=timezone.now())
    [job] = claim(identity)
    _fetch(identity, job, job.snapshot["source"]["digest"])
    settle(identity, judged(job, verdict="WA", passing=[1]))
    _dispatch()
    exam_publish(exam_id=exam.pk, now=timezone.now())
    as_student, admin = session_client(student), token_client(make_admin())

    def seen():
        result = as_student.get(f"/api/v1/exams/{exam.pk}/result")
        history = admin.get(ADMIN + f"submissions/ALGO/{submission.pk}")
        page = as_student.get(f"/submissions/ALGO/{submission.pk}")
        exam_page = as_student.get(f"/exams/{exam.pk}")
        assert result.status_code == history.status_code == page.status_code == exam_page.status_code == 200
        [shown_result] = re.findall(r"<h2[^>]*>Result</h2>.*?Total: \d+", exam_page.content.decode(), re.S)
        return (result.json(), shown_result), history.json(), page.content.decode()

    result, history, page = seen()
    assert result[0]["total"] > 0 and "Judging history" in page and "13 / 40" in result[1]
    year_on = timezone.now() + 400 * DAY
    for path in store.rglob("*"):
        if path.is_file():
            _age(path, 400 * DAY)
    gc_run(now=year_on, policy=POLICY)
    assert JudgeJob.objects.get(pk=job.pk).details_pruned_at is not None
    assert not SettlementEvent.objects.exists(), "all that could go went"
    as_student.force_login(student)  # a year on, the sign-in has expired and gone too

    result_after, history_after, page_after = seen()
    assert (result_after, history_after) == (result, history)
    for shown in ("Judging history", "Judged: this is the result", "print(&#x27;my answer&#x27;)"):
        assert (shown in page) and (shown in page_after), shown
    [cases] = re.findall(r"Result of each test case.*?</table>", page, re.S)
    assert cases.count("<tr>") == 4 and re.findall(r"Result of each test case.*?</table>", page_after, re.S) == [
        cases], "the same cases with their verdicts, times and scores"

    # A rejudge of the pruned submission judges it again from its code and the test data.
    submission_rejudge(submission_type="ALGO", submission_id=submission.pk, now=timezone.now())
    [again] = claim(identity)
    for digest in snapshot_digests(again.snapshot):
        served = _fetch(identity, again, digest)
        assert artifacts.sha256_hex(served if isinstance(served, bytes) else served.read_bytes()) == digest
    assert settle(identity, judged(again, verdict="AC")) == "settled"
    _dispatch()
    assert Submission.objects.get(pk=submission.pk).verdict == "AC"
    assert as_student.get(f"/api/v1/exams/{exam.pk}/result").json()["total"] == 40, "the rejudge's score counts"


def test_a_host_whose_clock_disagrees_with_the_database_prunes_nothing(store, algo, node_a, request):
    from kece import periodic

    _, identity = node_a
    _, job, stray = _old_work(algo, identity)
    request.getfixturevalue("skewed")  # this process five minutes ahead of the database
    with pytest.raises(periodic.StepPaused):
        periodic.gc_step()
    with pytest.raises(CommandError, match="clock"):
        call_command("kece_gc", stdout=StringIO())
    assert stray.exists() and JudgeJob.objects.get(pk=job.pk).details_pruned_at is None
