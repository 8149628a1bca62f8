"""A randomised soak on MariaDB: every kind of writer at once, then the invariants.

Submitters (free practice, lesson practice and two exams, ACM and OI, with
`Idempotency-Key` retries), participants handing in again and again, node agents (claim,
renew, settle with all three outcomes, duplicate posts, conflicting posts, silent crashes,
session changes), the reaper, the event dispatcher and an admin (rejudge, delete, drain,
enable) run in parallel threads for KECE_SOAK_SECONDS (default 20), and on, for at most as
long again, until each behaviour of `NEEDED` has happened. Any error that is not
one of the contract's domain answers fails the test — a deadlock, a lock-order violation or
a lock wait timeout among them.
"""

import collections
import hashlib
import os
import random
import threading
import time

import pytest
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from judging.models import (SUBMISSION_MODELS, EventState, ExamMode, ExamParticipant, ExamScore, FirstAccepted,
                            IdempotencyKey, JobState, JudgeJob, PracticeBest, PriorityClass, ProblemResult,
                            RejudgeItem, SettlementEvent)
from judging.services.claim import job_claim
from judging.services.events import events_dispatch
from judging.services.exams import exam_hand_in
from judging.services.idempotency import submit_once
from judging.services.leases import RenewItem, jobs_reap_expired, lease_renew
from judging.services.outcomes import PROBLEM_STATS
from judging.services.bulk_rejudge import rejudge_request, rejudges_advance
from judging.services.rejudge import submission_delete, submission_rejudge
from judging.services.settle import job_settle, job_settle_and_claim
from kece.errors import ExamClosed, LeaseLost, NotFound, NotVerified, ResultConflict, SessionSuperseded, Superseded
from nodes.models import CheckStatus, DesiredState, JudgeNode
from nodes.services import AgentReport, HeartbeatReport, node_heartbeat, node_session_open, node_update
from tests.factories import (HostGroupFactory, UserFactory, identity_of, make_exam, make_node, make_practice,
                             make_problem)
from tests.judging.helpers import infra_error, judged, released, submit

pytestmark = [pytest.mark.mariadb, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SOAK_SECONDS = float(os.environ.get("KECE_SOAK_SECONDS", "20"))
EXPECTED = (LeaseLost, Superseded, SessionSuperseded, NotFound, NotVerified, ExamClosed)
# What every run must have exercised. A run on a slow machine may not have got to each in
# its time (a REJUDGE-class job is claimed only once the saturated queue ages it forward):
# it goes on until it has, for at most as long again.
NEEDED = ("claimed", "settle:JUDGED:settled", "settle:INFRA_ERROR:requeued", "settle:RELEASED:requeued",
          "rejudge", "bulk_rejudge", "claimed:EXAM", "claimed:PRACTICE", "claimed:REJUDGE",
          "delete", "session_change", "node:DRAINING", "settle:duplicate", "claimed:carried",
          "settle:result_conflict",
          "claimed:resent", "submitted:practice", "submitted:exam", "hand_in:fresh", "hand_in:repeat",
          "slots_checked")


class Soak:
    def __init__(self, seconds):
        self.deadline = time.monotonic() + seconds
        self.overtime = self.deadline + seconds
        self.errors: list[str] = []
        self.counts = collections.Counter()
        self.effective: list[tuple] = []  # (submission ref, generation) of each "settled"
        self.lock = threading.Lock()

    def running(self):
        now = time.monotonic()
        return not self.errors and (now < self.deadline or (now < self.overtime and self.missing()))

    def missing(self) -> list[str]:
        with self.lock:
            return [needed for needed in NEEDED if self.counts[needed] == 0]

    def count(self, what):
        with self.lock:
            self.counts[what] += 1

    def actor(self, name, step, pause=(0.0, 0.02)):
        def run():
            rng = random.Random(name)
            try:
                while self.running():
                    try:
                        step(rng)
                    except EXPECTED as exc:
                        self.count(f"{name}:{exc.code}")
                    time.sleep(rng.uniform(*pause))
            except Exception as exc:  # deadlocks, lock-order violations, bugs
                with self.lock:
                    self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
            finally:
                connection.close()
        return threading.Thread(target=run, name=name, daemon=True)


def _node_actor(soak, node, identity_box):
    held: dict[int, JudgeJob] = {}
    report = AgentReport(node.agent_version, node.runtime_spec, node.max_slots)

    def step(rng):
        identity = identity_box[0]
        now = timezone.now()
        try:
            node_heartbeat(node_id=node.pk, credential_digest_value=identity.credential_digest,
                           session_epoch=identity.session_epoch,
                           beat=HeartbeatReport(report, len(held), True, {}), now=now)
            for job in job_claim(identity=identity, free_slots=rng.randint(1, 3), now=now).jobs:
                held[job.pk] = job
                soak.count("claimed")
                soak.count(f"claimed:{job.priority_class}")
            if held and rng.random() < 0.5:
                lease_renew(identity=identity, now=timezone.now(), items=[
                    RenewItem(j.pk, j.lease_epoch, rng.choice(["COMPILING", "JUDGING"]), 1) for j in held.values()])
            for job in list(held.values()):
                roll = rng.random()
                if roll < 0.05:
                    held.pop(job.pk)  # the node "crashes" on it: only the reaper can help
                    continue
                if roll < 0.55:
                    continue  # still judging
                request = (judged(job, verdict=rng.choice(["AC", "WA", "TLE"])) if roll < 0.85
                           else infra_error(job) if roll < 0.95 else released(job))
                held.pop(job.pk)
                carries = rng.randint(1, 2) if rng.random() < 0.5 else 0  # the result carries the next claim
                try:
                    if carries:
                        status, carried = job_settle_and_claim(identity=identity, request=request,
                                                               now=timezone.now(), free_slots=carries)
                        for leased in carried.jobs if carried else []:
                            held[leased.pk] = leased
                            soak.count("claimed:carried")
                            soak.count(f"claimed:{leased.priority_class}")  # a class may be claimed only so
                    else:
                        status = job_settle(identity=identity, request=request, now=timezone.now())
                except (LeaseLost, Superseded) as exc:
                    soak.count(f"settle:{exc.code}")
                    continue
                soak.count(f"settle:{request.outcome}:{status}")
                if status == "settled":
                    with soak.lock:
                        soak.effective.append(((job.submission_type, job.submission_id), job.generation))
                if rng.random() < 0.3:  # the response was "lost": post the same result again
                    if carries:  # and get back what that answer held, leases and all
                        again, resent = job_settle_and_claim(identity=identity, request=request,
                                                             now=timezone.now(), free_slots=carries)
                        for leased in resent.jobs if resent else []:
                            if leased.pk in held:
                                soak.count("claimed:resent")
                            else:
                                soak.count("claimed:carried")
                                soak.count(f"claimed:{leased.priority_class}")
                            held[leased.pk] = leased
                    else:
                        again = job_settle(identity=identity, request=request, now=timezone.now())
                    assert again == "duplicate", again
                    soak.count("settle:duplicate")
                if status == "settled" and rng.random() < 0.2:  # a different result for the same lease
                    _post_a_conflicting_result(soak, identity, job, request)
            if rng.random() < 0.01:  # restart: a new session, old leases released at once
                node_session_open(node_id=node.pk, credential_digest_value=identity.credential_digest,
                                  report=report, now=timezone.now())
                held.clear()
                identity_box[0] = identity_of(node)
                soak.count("session_change")
        except SessionSuperseded:
            held.clear()
            identity_box[0] = identity_of(node)
            soak.count("session_superseded")

    return step


def _post_a_conflicting_result(soak, identity, job, request):
    other = judged(job, verdict="WA" if request.verdict == "AC" else "AC")
    try:
        job_settle(identity=identity, request=other, now=timezone.now())
    except ResultConflict as exc:
        soak.count(f"settle:{exc.code}")
    except Superseded as exc:  # a rejudge or delete came between the two posts
        soak.count(f"conflict:{exc.code}")
    else:
        raise AssertionError(f"job {job.pk}: a second, different result for a settled lease was accepted")


def _admin_step(soak, nodes):
    def step(rng):
        now = timezone.now()
        roll = rng.random()
        model_type = rng.choice(["ALGO", "SQL"])
        ids = list(SUBMISSION_MODELS[model_type].objects.filter(deleted_at__isnull=True)
                   .values_list("id", flat=True)[:500])
        if roll < 0.4 and ids:
            submission_rejudge(submission_type=model_type, submission_id=rng.choice(ids), now=now)
            soak.count("rejudge")
        elif roll < 0.45 and ids:
            refs = [{"type": model_type, "id": pk} for pk in rng.sample(ids, min(len(ids), rng.randint(1, 12)))]
            rejudge_request(selector={"submissions": refs}, actor=None, now=now)
            soak.count("bulk_rejudge")
        elif roll < 0.55 and ids:
            submission_delete(submission_type=model_type, submission_id=rng.choice(ids), now=now)
            soak.count("delete")
        elif roll < 0.8:
            node = JudgeNode.objects.get(pk=rng.choice(nodes).pk)
            target = DesiredState.DRAINING if node.desired_state == DesiredState.ENABLED else DesiredState.ENABLED
            node_update(node_id=node.pk, revision=node.revision, changes={"desired_state": target},
                        actor="soak-admin", now=now)
            soak.count(f"node:{target}")
    return step


def _slot_watch(soak, nodes, groups):
    """Every committed state keeps each node and host group within its slots (expired but
    unreaped leases included), whichever way the jobs were claimed."""
    node_slots = {n.pk: n.max_slots for n in nodes}
    group_slots = {g.pk: g.total_slots for g in groups}

    def step(rng):
        rows = list(JudgeJob.objects.filter(state=JobState.RUNNING).values_list("node_id", "host_group_id"))
        for node_id, count in collections.Counter(n for n, _ in rows).items():
            assert count <= node_slots[node_id], f"node {node_id} holds {count} leases"
        for group_id, count in collections.Counter(g for _, g in rows).items():
            assert count <= group_slots[group_id], f"host group {group_id} holds {count} leases"
        soak.count("slots_checked")
    return step


def _check_invariants(soak, students):
    jobs = list(JudgeJob.objects.all())
    # What the nodes were told took effect is exactly what the rows say took effect: each
    # COMPLETED job answered "settled" once, and nothing else did.
    effective = collections.Counter(soak.effective)
    assert not [k for k, n in effective.items() if n > 1], "a generation took effect twice"
    completed = {((j.submission_type, j.submission_id), j.generation) for j in jobs if j.state == JobState.COMPLETED}
    assert set(effective) == completed
    for job in jobs:
        if job.state == JobState.QUEUED:
            assert job.node_id is None and job.lease_until is None and job.session_epoch is None, job.pk
        elif job.state == JobState.RUNNING:
            assert job.node_id and job.host_group_id and job.lease_until and job.session_epoch, job.pk
            assert 1 <= job.attempts <= 3, job.pk
        elif job.state == JobState.COMPLETED:
            assert job.result and job.result_digest and job.finished_at and job.settled_status == "settled", job.pk
        elif job.state == JobState.FAILED:
            assert job.finished_at and job.error and job.attempts == 3, job.pk
        else:
            assert job.state == JobState.CANCELLED and job.finished_at, job.pk
    latest = collections.defaultdict(int)
    for job in jobs:
        key = (job.submission_type, job.submission_id)
        latest[key] = max(latest[key], job.generation)
    jobs_by_id = {j.pk: j for j in jobs}
    # Every job sorts within the aging bound of when it became due, and every bulk item
    # queued a generation of its own submission: at REJUDGE class, or, when it replaced a
    # job still waiting or running (cancelled by it, at its creation), in that job's class.
    from datetime import timedelta
    from django.conf import settings

    bound = timedelta(seconds=settings.KECE_MAX_CLASS_WAIT_S)
    assert all(j.available_at - bound <= j.claim_key <= j.available_at for j in jobs)
    generations = {(j.submission_type, j.submission_id, j.generation): j for j in jobs}
    for item in RejudgeItem.objects.filter(job_id__isnull=False):
        job = jobs_by_id[item.job_id]
        before = generations.get((job.submission_type, job.submission_id, job.generation - 1))
        replaced_live = before is not None and before.state == JobState.CANCELLED \
            and before.error == "superseded" and before.finished_at == job.created_at
        assert (job.submission_type, job.submission_id, job.priority_class) == (
            item.submission_type, item.submission_id,
            before.priority_class if replaced_live else PriorityClass.REJUDGE), item.pk
    for submission_type, model in SUBMISSION_MODELS.items():
        for submission in model.objects.all():
            if submission.current_judge_job_id is None:
                # Only an OI exam's submission waits without a job: saved, not (yet) handed in.
                assert submission.exam_id and submission.exam.mode == ExamMode.OI, (submission_type, submission.pk)
                continue
            current = jobs_by_id[submission.current_judge_job_id]
            assert current.generation == latest[(submission_type, submission.pk)]
            if submission.judged_generation is not None:
                settled_jobs = [j for j in jobs if (j.submission_type, j.submission_id) == (submission_type,
                                submission.pk) and j.generation == submission.judged_generation]
                assert settled_jobs and settled_jobs[0].state in (JobState.COMPLETED, JobState.FAILED)
                judged_job = settled_jobs[0]
                verdict = judged_job.result["verdict"] if judged_job.state == JobState.COMPLETED else None
                assert submission.verdict == verdict, (submission_type, submission.pk)
    # Each settlement wrote its outbox row in its own transaction.
    stats_events = set(SettlementEvent.objects.filter(event_type=PROBLEM_STATS).values_list("job_id", flat=True))
    assert not {j.pk for j in jobs if j.state == JobState.COMPLETED} - stats_events
    for student in students:
        _check_results_from_events(student)
    _check_exams_and_practices(soak)


def _check_exams_and_practices(soak):
    """One hand-in batch per participant, confirmations that never changed, the last OI
    submission of each problem judged, one submission per idempotency key, and exam and
    practice scores equal to a recomputation from the submission rows."""
    for participant in ExamParticipant.objects.select_related("exam"):
        exam, user_id = participant.exam, participant.user_id
        confirmations = soak.hand_ins.get((exam.pk, user_id), set())
        assert len(confirmations) <= 1, (exam.pk, user_id, confirmations)
        if participant.handed_in_at is None:
            assert not confirmations
            continue
        assert confirmations == {(participant.handed_in_at, participant.hand_in_jobs)}
        refs = [(t, pk) for t, model in SUBMISSION_MODELS.items()
                for pk in model.objects.filter(exam=exam, user_id=user_id).values_list("id", flat=True)]
        batch = [j for j in JudgeJob.objects.filter(created_at=participant.handed_in_at) if j.submission_ref in refs]
        assert len(batch) == participant.hand_in_jobs, (exam.pk, user_id)
        for submission_type, model in SUBMISSION_MODELS.items():
            mine = model.objects.filter(exam=exam, user_id=user_id, deleted_at__isnull=True)
            for problem_id in set(mine.values_list("problem_id", flat=True)):
                counted = mine.filter(problem_id=problem_id)
                last = counted.order_by("-id").first()
                # The hand-in judged the last submission alive when it happened (an admin may
                # delete that one afterwards, which judges no older one).
                handed = (model.objects.filter(exam=exam, user_id=user_id, problem_id=problem_id)
                          .filter(Q(deleted_at__isnull=True) | Q(deleted_at__gt=participant.handed_in_at))
                          .order_by("-id").first())
                assert handed.current_judge_job_id is not None, ("the hand-in judged the last one", handed.pk)
                best = (last if exam.mode == ExamMode.OI
                        else counted.filter(score__isnull=False).order_by("-score", "id").first())
                row = ExamScore.objects.filter(exam=exam, user_id=user_id, problem_id=problem_id).first()
                expected = (best.score or 0) if best else 0
                assert (row.score if row else 0) == expected, (exam.mode, user_id, problem_id)
    for (user_id, key), ids in soak.keys.items():
        assert len(ids) == 1, (user_id, key, ids)
        row = IdempotencyKey.objects.get(user_id=user_id, key_digest=hashlib.sha256(key.encode()).hexdigest())
        assert {(row.submission_type, row.submission_id)} == ids
    for row in PracticeBest.objects.all():
        model = SUBMISSION_MODELS["SQL" if row.problem.kind == "SQL" else "ALGO"]
        best = (model.objects.filter(user_id=row.user_id, problem_id=row.problem_id, lesson_practice_id=row.practice_id,
                                     deleted_at__isnull=True, score__isnull=False).order_by("-score", "id").first())
        assert (row.best_score, row.best_submission_id) == ((best.score, best.pk) if best else (0, None))


def _check_results_from_events(student):
    """The outbox's derived rows (best result, first accepted) equal what the submission rows
    give now, after every event was applied: an event lost, skipped or applied before its
    settlement committed leaves them behind."""
    for submission_type, model in SUBMISSION_MODELS.items():
        live = model.objects.filter(user=student, deleted_at__isnull=True)
        for problem_id in set(model.objects.filter(user=student).values_list("problem_id", flat=True)):
            mine = live.filter(problem_id=problem_id)
            best = mine.filter(score__isnull=False).order_by("-score", "id").first()
            row = ProblemResult.objects.filter(user=student, problem_id=problem_id).first()
            got = (row.best_score, row.best_submission_id) if row else (0, None)
            assert got == ((best.score, best.pk) if best else (0, None)), (submission_type, problem_id)
            accepted = mine.filter(verdict="AC").order_by("judged_at", "id").first()
            first = FirstAccepted.objects.filter(user=student, problem_id=problem_id).first()
            assert (first.submission_id if first else None) == (accepted.pk if accepted else None), problem_id


@pytest.mark.usefixtures("unlimited_submits")  # eight students submit as fast as two loops can
def test_randomised_soak_keeps_every_invariant(settings):
    settings.KECE_LEASE_TTL_MS = 1500
    settings.KECE_RETRY_BACKOFF_MS = 50
    # The queue stays saturated: a short aging bound lets bulk-rejudge work through it.
    settings.KECE_MAX_CLASS_WAIT_S = 2
    students = [UserFactory() for _ in range(8)]  # a lost event is then rarely covered by a later one
    problems = [make_problem(languages=("python",)), make_problem(languages=("cpp",)), make_problem(kind="SQL")]
    nodes, boxes = [], []
    # Two python nodes share a host group whose 5 slots are fewer than their 3 + 3.
    groups = [HostGroupFactory(total_slots=5) for _ in range(3)]
    for pool, group in (("python", 0), ("python", 0), ("python", 1), ("cpp", 1), ("mysql", 2)):
        node, identity = make_node(pool=pool, max_slots=3, host_group=groups[group])
        JudgeNode.objects.filter(pk=node.pk).update(self_check_status=CheckStatus.PASSED, self_check_revision=1,
                                                   self_check_runtime_spec=node.runtime_spec,
                                                   self_check_agent_version=node.agent_version)
        nodes.append(node)
        boxes.append([identity])
    soak = Soak(SOAK_SECONDS)

    practice = make_practice(*problems)
    # An exam keeps its problems secret until it ends (`judging.visibility`): the exams hold
    # problems of their own, of the same three kinds.
    exam_problems = [make_problem(languages=("python",)), make_problem(languages=("cpp",)), make_problem(kind="SQL")]
    exams = [make_exam(*exam_problems, mode=mode, participants=students, minutes=120) for mode in ("ACM", "OI")]
    soak.hand_ins, soak.keys = collections.defaultdict(set), collections.defaultdict(set)

    def submit_step(rng):
        if time.monotonic() > soak.deadline - SOAK_SECONDS / 4:
            # The last quarter: no new work, so the saturated queue drains down to the
            # bulk-rejudge jobs that every newer exam and practice job went ahead of.
            return
        entry = rng.choice(["free", "practice", "exam"])
        problem, student = rng.choice(exam_problems if entry == "exam" else problems), rng.choice(students)
        language = "mysql" if problem.kind == "SQL" else problem.current_manifest.languages[0]
        link = ({"lesson_practice_id": practice.pk} if entry == "practice"
                else {"exam_id": rng.choice(exams).pk} if entry == "exam" else {})
        code = f"-- {rng.random()}"
        key = f"key-{rng.random()}" if rng.random() < 0.5 else None
        body = {"problemId": problem.pk, "language": language, "code": code, **link}

        # Free submissions come in every class an entry point gives: exam-class work beside practice.
        extra = {"priority_class": rng.choice([PriorityClass.EXAM, PriorityClass.PRACTICE])} if entry == "free" else {}

        def once(after_insert):
            return submit(student, problem, language=language, code=code, after_insert=after_insert, **link, **extra)

        for attempt in range(2 if key else 1):  # a retry whose first answer was "lost"
            submission, _ = submit_once(once, user=student, key=key, data=body, now=timezone.now())
            if key:
                with soak.lock:
                    soak.keys[(student.pk, key)].add((submission.TYPE, submission.pk))
        soak.count(f"submitted:{entry}")

    def hand_in_step(rng):
        exam, student = rng.choice(exams), rng.choice(students)
        if rng.random() < 0.9 and soak.counts["submitted:exam"] < 40:
            return  # most of the run, the exams are still being written
        confirmation = exam_hand_in(exam_id=exam.pk, user=student, now=timezone.now())
        with soak.lock:
            soak.hand_ins[(exam.pk, student.pk)].add((confirmation.handed_in_at, confirmation.jobs))
        soak.count("hand_in:fresh" if confirmation.fresh else "hand_in:repeat")

    threads = [soak.actor(f"submitter-{i}", submit_step, (0.0, 0.03)) for i in range(2)]
    threads += [soak.actor(f"node-{n.pk}", _node_actor(soak, n, box)) for n, box in zip(nodes, boxes)]
    threads += [soak.actor(f"hand-in-{i}", hand_in_step, (0.02, 0.08)) for i in range(2)]
    threads.append(soak.actor("reaper", lambda rng: jobs_reap_expired(now=timezone.now()), (0.2, 0.3)))
    threads.append(soak.actor("dispatcher", lambda rng: events_dispatch(now=timezone.now()), (0.1, 0.2)))
    threads.append(soak.actor("rejudger", lambda rng: rejudges_advance(now=timezone.now(), batch=5), (0.1, 0.2)))
    threads.append(soak.actor("admin", _admin_step(soak, nodes), (0.05, 0.15)))
    threads.append(soak.actor("slots", _slot_watch(soak, nodes, groups), (0.05, 0.1)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * SOAK_SECONDS + 60)
        assert not thread.is_alive(), f"{thread.name} hung"
    assert soak.errors == []

    # Quiesce: every lease expires, the reaper and dispatcher finish their work.
    far = timezone.now() + timezone.timedelta(hours=1)
    while jobs_reap_expired(now=far).requeued:
        far += timezone.timedelta(hours=1)
    while events_dispatch(now=far).applied:
        pass
    _check_invariants(soak, students)
    assert not JudgeJob.objects.filter(state=JobState.RUNNING, lease_until__lte=far).exists()
    assert set(SettlementEvent.objects.values_list("state", flat=True)) <= {EventState.DONE}
    print("soak counts:", dict(sorted(soak.counts.items())))
    for needed in NEEDED:
        assert soak.counts[needed] > 0, f"the soak never exercised {needed}"
