"""Reads several callers share: user-facing status, pool readiness, pages of submissions."""

import json
import logging
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from django.db import DatabaseError
from django.db.models import CharField, Q, Value

from judging.models import JobState
from judging.timing import offline_after
from nodes.models import VERIFIED, DesiredState, HostGroupStatus, JudgeNode
from pools.registry import POOLS

logger = logging.getLogger("kece.node_api")


def ready_nodes(*, now):
    """Nodes that can take their pool's new jobs (`nodes.models.may_take_judge_jobs`), with a
    fresh heartbeat, an open session and the runtime spec their pool's jobs are created
    with. (The console shows such a node as ready, or busy when its slots are full.)"""
    serves_current_spec = Q()
    for name, pool in POOLS.items():
        serves_current_spec |= Q(pool=name, runtime_spec=pool.spec.id)
    return JudgeNode.objects.filter(
        serves_current_spec,
        desired_state=DesiredState.ENABLED, session_open=True, health_ok=True, quarantined_at__isnull=True,
        last_heartbeat_at__gte=now - offline_after(), revoked_at__isnull=True,
        host_group__status=HostGroupStatus.ACTIVE,
    ).filter(VERIFIED)


def ready_slots(*, now) -> dict[str, int]:
    """Per pool, the slots of its ready nodes: what it can judge at once now."""
    from django.db.models import Sum

    return {pool: n or 0 for pool, n in ready_nodes(now=now).values_list("pool").annotate(n=Sum("max_slots"))}


def submission_state(submission, *, now):
    """(job, status, waitReason) of a submission now, as the user API and pages show it."""
    from judging.models import JudgeJob

    job = JudgeJob.objects.filter(pk=submission.current_judge_job_id).first()
    # A ready node only counts if it may be given this job: same pool *and* the runtime spec
    # the job was created with (API.md, "Runtime specs"). Otherwise the job waits for no node.
    # Read only for a job that waits (the callable is not called otherwise).
    status, wait_reason = submission_status(
        submission, job, now=now,
        pool_has_ready_node=lambda: ready_nodes(now=now).filter(pool=job.pool, runtime_spec=job.runtime_spec).exists())
    return job, status, wait_reason


def submission_status(submission, job, *, now, pool_has_ready_node) -> tuple[str, str | None]:
    """(status, waitReason) as the user sees them (ARCHITECTURE §4, API.md).

    `pool_has_ready_node` is a callable: the node read is only needed for a job that waits.
    """
    if submission.deleted_at is not None or (job is not None and job.state == JobState.CANCELLED):
        return "CANCELLED", None
    if job is None:
        return (submission.verdict or "SYSTEM_ERROR"), None
    if job.state == JobState.COMPLETED:
        return submission.verdict or job.result.get("verdict"), None
    if job.state == JobState.FAILED:
        return "SYSTEM_ERROR", None
    if job.state == JobState.RUNNING:
        return (job.progress_phase or "COMPILING"), None
    if job.available_at > now:
        return "PENDING", "backoff"
    if not pool_has_ready_node():
        return "PENDING", "no_node"
    return "PENDING", "queued"


def submission_keys(**link):
    """(created_at, type, id) of the live submissions `link` names (user=…, exam=…,
    lesson_practice=…), newest first, for a paginator to cut pages from. Code and SQL
    submissions are two tables whose ids may collide: one UNION pages through both by time."""
    from judging.models import SUBMISSION_MODELS

    keys = [model.objects.filter(deleted_at__isnull=True, **link)
            .annotate(kind=Value(model.TYPE, output_field=CharField())).values_list("created_at", "kind", "id")
            for model in SUBMISSION_MODELS.values()]
    return keys[0].union(*keys[1:], all=True).order_by("-created_at", "-id")


def submissions_of(keys) -> list:
    """The rows of a page of `submission_keys`, in its order, with their problem and exam:
    one statement per table, whatever the page's length."""
    from judging.models import SUBMISSION_MODELS

    keys = list(keys)
    loaded = {}
    for kind, model in SUBMISSION_MODELS.items():
        ids = [pk for _at, k, pk in keys if k == kind]
        loaded.update({(kind, s.pk): s for s in model.objects.filter(pk__in=ids).select_related("problem", "exam")})
    return [loaded[(kind, pk)] for _at, kind, pk in keys if (kind, pk) in loaded]


@dataclass(frozen=True)
class Shown:
    """A submission's state as its viewer may see it: an unpublished OI exam's stays waiting."""

    job: object
    status: str
    wait_reason: str | None
    hidden: bool


def shown_states(submissions, *, viewer, now) -> list[Shown]:
    """`submission_state` and `exams.hidden_wait` for a list: their jobs in one statement, the
    ready nodes once if a job waits, the viewer's permissions once (rows from
    `submissions_of` come with their exam)."""
    from judging.models import JudgeJob
    from judging.services.exams import handed_in_pairs, held_status, hidden_wait

    jobs = JudgeJob.objects.in_bulk([s.current_judge_job_id for s in submissions if s.current_judge_job_id])
    ready = []

    def pool_has_ready_node(job) -> bool:
        if not ready:
            ready.append(set(ready_nodes(now=now).values_list("pool", "runtime_spec").distinct()))
        return (job.pool, job.runtime_spec) in ready[0]

    handed_in = handed_in_pairs(submissions)
    shown = []
    for submission in submissions:
        job = jobs.get(submission.current_judge_job_id)
        status, wait_reason = submission_status(submission, job, now=now,
                                                pool_has_ready_node=lambda job=job: pool_has_ready_node(job))
        if (hidden := hidden_wait(submission, viewer, handed_in=handed_in)) is not None:
            status, wait_reason = held_status(hidden), hidden
        shown.append(Shown(job, status, wait_reason, hidden is not None))
    return shown


# What a download reads of its job and of the node holding it: one plain join, on every
# download (a queryset with select_related costs more to compile than to run).
_ARTIFACT_JOB = ("id", "state", "node_id", "lease_epoch", "session_epoch", "lease_until", "snapshot",
                 "submission_type", "submission_id")
_ARTIFACT_NODE = ("id", "credential_digest", "revoked_at", "session_open", "session_epoch")


def artifact_for_lease(*, identity, job_id: int, lease_epoch: int, digest: str, now) -> Path | bytes:
    """Check that `digest` may be downloaded under this live lease; return what to send: the
    source's bytes, or the path of a file in the content store.

    Not this node's live lease → LeaseLost; not one of the job's files → NotInManifest.
    The credential and session are checked again on the node's row, read with the job's
    in the same statement: the caller may have been authenticated from the credential
    cache (`judging.auth`), and a revoke, rotation or new session counts from its commit.
    The job's source is read from its submission row, its durable copy: it never enters the
    content store (a file written and synced per judged job, for bytes the database holds
    already). A job whose source is not a submission's code (a diagnostic's) has it in the
    store.
    """
    from judging import artifacts
    from judging.identity import check_node_identity
    from judging.models import JudgeJob
    from judging.services.snapshot import snapshot_digests
    from kece.errors import LeaseLost, NotInManifest
    from kece.rows import load_joined, shape

    job_shape, node_shape = shape(JudgeJob, _ARTIFACT_JOB), shape(JudgeNode, _ARTIFACT_NODE)
    found = load_joined(job_shape, node_shape,
                        f"SELECT {job_shape.columns_of('j')}, {node_shape.columns_of('n')} FROM {job_shape.table} j"
                        f" LEFT JOIN {node_shape.table} n ON n.id = j.node_id WHERE j.id = %s", [job_id])
    job, node = found if found is not None else (None, None)
    if job is None or job.node_id is None or job.node_id != identity.node_id:
        raise LeaseLost()
    check_node_identity(node if node.pk is not None else None, identity)
    if (
        job.state != JobState.RUNNING or job.lease_epoch != lease_epoch or job.session_epoch != identity.session_epoch
        or job.lease_until is None or job.lease_until <= now
    ):
        raise LeaseLost()
    if digest not in snapshot_digests(job.snapshot):
        raise NotInManifest()
    if digest == (job.snapshot.get("source") or {}).get("digest") and \
            (code := submitted_sources([job]).get(job.pk)) is not None:
        return code.encode("utf-8")
    return artifacts.path_for(digest)


def _source_reads(jobs) -> list[tuple]:
    """What reads the sources of `jobs` that are their submissions' code: per kind of
    submission, ((job, digest) pairs, the shape read, its SELECT, its ids)."""
    from judging.models import SUBMISSION_MODELS
    from kece.rows import shape

    wanted = defaultdict(list)
    for job in jobs:
        digest = ((job.snapshot or {}).get("source") or {}).get("digest")
        if digest and job.submission_type in SUBMISSION_MODELS:
            wanted[job.submission_type].append((job, digest))
    reads = []
    for submission_type, pairs in wanted.items():
        code_shape = shape(SUBMISSION_MODELS[submission_type], ("id", "code"))
        ids = sorted({job.submission_id for job, _ in pairs})
        reads.append((pairs, code_shape, f"SELECT {code_shape.columns} FROM {code_shape.table} WHERE"
                                         f" {code_shape.pk_column} IN ({', '.join(['%s'] * len(ids))})", ids))
    return reads


def _sources_found(reads, rows_each) -> dict[int, str]:
    """Each job's code that matches its source's digest, by job id."""
    from judging import artifacts

    found = {}
    for (pairs, code_shape, _, _), rows in zip(reads, rows_each):
        codes = {row.pk: row.code for row in map(code_shape.build, rows)}
        for job, digest in pairs:
            code = codes.get(job.submission_id)
            if code is not None and artifacts.sha256_hex(code.encode("utf-8")) == digest:
                found[job.pk] = code
    return found


def submitted_sources(jobs) -> dict[int, str]:
    """Each job's source that is its submission's code (the text whose UTF-8 bytes its digest
    names), read from the submission rows (one statement per kind of submission), by job id.
    A job whose source is not its submission's code (a diagnostic's, in the content store) is
    left out."""
    from kece.rows import fetch_each

    reads = _source_reads(jobs)
    return _sources_found(reads, fetch_each([(sql, ids) for _, _, sql, ids in reads]))


def sources_with_commit(jobs):
    """Inside the transaction that leases `jobs`: their sources that may go with the claim's
    answer (`submitted_sources`, those that could fit), read with the transaction's COMMIT
    instead of in a round trip of their own after it (`kece.rows.read_later`). Returns what
    to call, once committed, for them by job id."""
    from kece.rows import read_later

    reads = _source_reads(_could_fit(jobs))
    sinks = [read_later(sql, ids) for _, _, sql, ids in reads]
    return lambda: _sources_found(reads, sinks)


# The most bytes of sources one claim answer carries, as sent (JSON-escaped): a batch of
# large sources is downloaded by its node instead of swelling one answer (a node of 256
# slots, a source of up to 256 KiB each).
INLINE_SOURCES_MAX_BYTES = 4 << 20


def _could_fit(jobs) -> list:
    """The jobs whose sources are read to go with them: those that could fit, by what their
    sources take unescaped (what they take escaped decides)."""
    fitting, planned = [], 0
    for job in jobs:
        size = ((job.snapshot or {}).get("source") or {}).get("bytes") or 0
        if planned + size <= INLINE_SOURCES_MAX_BYTES:
            fitting.append(job)
            planned += size
    return fitting


def job_payloads(jobs, *, now, inline_source: bool = False, sources: dict | None = None) -> list[dict]:
    """The claim response items for leased jobs; with `inline_source`, each whose source is its
    submission's code carries that code as `sourceText`, and the node need not download it,
    up to `INLINE_SOURCES_MAX_BYTES` in all. `sources`: those codes, read with the leases'
    COMMIT (`sources_with_commit`); else they are read now. The leases are committed
    already: if the codes cannot be read now, the jobs go without them (the node downloads
    the sources) rather than not at all."""
    payloads = [job_payload(job, now=now) for job in jobs]
    if not (inline_source and jobs):
        return payloads
    if sources is None:
        try:
            sources = submitted_sources(_could_fit(jobs))
        except DatabaseError:
            logger.warning("sources not sent with the jobs", exc_info=True, extra={"jobs": [job.pk for job in jobs]})
            return payloads
    budget = INLINE_SOURCES_MAX_BYTES
    for job, payload in zip(jobs, payloads):
        if job.pk in sources and (size := len(json.dumps(sources[job.pk]))) <= budget:
            payload["sourceText"] = sources[job.pk]
            budget -= size
    return payloads


def job_payload(job, *, now) -> dict:
    """The claim response item for a leased job (API.md, "Job")."""
    from judging.timing import ms_between

    snapshot = job.snapshot or {}
    payload = {
        "jobId": job.pk,
        "kind": job.kind,
        "submissionType": job.submission_type,
        "submissionId": job.submission_id,
        "generation": job.generation,
        "pool": job.pool,
        "leaseEpoch": job.lease_epoch,
        "leaseRemainingMs": ms_between(job.lease_until, now),
        "runtimeSpec": job.runtime_spec,
        "manifestId": job.manifest_id,
        "limits": snapshot.get("limits") or {},
        "source": snapshot.get("source"),
        "cases": snapshot.get("cases") or [],
        "sql": snapshot.get("sql"),
    }
    if "ownChecks" in snapshot:
        payload["ownChecks"] = bool(snapshot["ownChecks"])
    return payload


def deletion_impact(**link) -> dict:
    """What deleting an exam, practice or problem would take with it: its live submissions
    (`link` names them, as `delete_with_submissions` does) and their open judge jobs."""
    from judging.models import SUBMISSION_MODELS, JudgeJob

    submissions, jobs = 0, []
    for model in SUBMISSION_MODELS.values():
        rows = model.objects.filter(deleted_at__isnull=True, **link)
        submissions += rows.count()
        jobs += [pk for pk in rows.values_list("current_judge_job_id", flat=True) if pk is not None]
    return {"submissions": submissions,
            "open_jobs": JudgeJob.objects.filter(pk__in=jobs, state__in=JobState.ACTIVE).count()}


def exam_standings(exam, participants, *, now) -> list[dict]:
    """One row per participant: state, hand-in, the score of each exam problem and question
    (None where there is none yet: not judged, not answered or not handed in) and the total,
    from the same rows as a participant's own result (`exam_score`, the scored answers); and
    whether they submitted or answered anything (`worked`)."""
    from judging.models import SUBMISSION_MODELS, ExamAnswer, ExamScore
    from judging.services.exams import participant_state

    problems, questions = list(exam.problems.all()), list(exam.questions.all())
    users = [p.user_id for p in participants]
    scores = {(s.user_id, s.problem_id): s for s in ExamScore.objects.filter(exam=exam, user_id__in=users)}
    saved = list(ExamAnswer.objects.filter(participant__in=[p.pk for p in participants]))
    answers = {(a.participant_id, a.question_id): a.score for a in saved}
    # Who submitted anything in the exam, judged or not (one statement per kind of submission),
    # or ticked an option (the exam page saves every question, ticked or not).
    submitted = {user for model in SUBMISSION_MODELS.values()
                 for user in model.objects.filter(exam=exam, user_id__in=users).values_list("user_id", flat=True)
                 .distinct()} if users else set()
    answered = {a.participant_id for a in saved if a.choices}
    rows = []
    for participant in participants:
        by_problem = [scores.get((participant.user_id, p.problem_id)) for p in problems]
        by_question = [answers.get((participant.pk, q.pk)) for q in questions]
        handed_in = participant.handed_in_at is not None
        known = handed_in or any(by_problem)
        rows.append({
            "participant": participant, "state": participant_state(exam, participant, now=now),
            "worked": participant.user_id in submitted or participant.pk in answered,
            "problems": by_problem, "questions": by_question if handed_in else [None] * len(questions),
            "objective": participant.objective_score if handed_in else None,
            "total": sum(s.points for s in by_problem if s) + (participant.objective_score if handed_in else 0)
            if known else None,
        })
    return rows


def standing_total(exam):
    """The total `exam_standings` gives a participant (0 where it gives none yet), as an
    expression over their row: to rank a whole exam in the database, a page at a time."""
    from django.db.models import Case, F, IntegerField, OuterRef, Subquery, Sum, When
    from django.db.models.functions import Coalesce

    from judging.models import ExamScore

    points = (ExamScore.objects.filter(exam=exam, user_id=OuterRef("user_id")).values("user_id")
              .annotate(total=Sum("points")).values("total"))
    return Coalesce(Subquery(points, output_field=IntegerField()), Value(0)) + Case(
        When(handed_in_at__isnull=False, then=F("objective_score")), default=Value(0), output_field=IntegerField())


SETTLED, RUNNING_NOW = "SETTLED", "RUNNING"


def submission_history(submission) -> list[dict]:
    """Every generation of a submission with every lease it had, oldest first (two reads):
    the leases that ended without settling the job (`JobAttempt`), then the one that holds it
    now (RUNNING) or settled it (SETTLED), from the job row. Hidden checks are not its
    history: they belong to the system account's own rows."""
    from judging.models import JobAttempt, JobKind, JudgeJob

    jobs = list(JudgeJob.objects.filter(submission_type=submission.TYPE, submission_id=submission.pk,
                                        kind=JobKind.JUDGE).order_by("generation"))
    ended = {}
    for attempt in JobAttempt.objects.filter(job_id__in=[job.pk for job in jobs]).order_by("lease_epoch"):
        ended.setdefault(attempt.job_id, []).append({
            "leaseEpoch": attempt.lease_epoch, "nodeId": attempt.node_id, "claimedAt": attempt.claimed_at,
            "endedAt": attempt.ended_at, "outcome": attempt.outcome, "error": attempt.error})
    history = []
    for job in jobs:
        leases = list(ended.get(job.pk, []))
        if job.state == JobState.RUNNING:
            leases.append({"leaseEpoch": job.lease_epoch, "nodeId": job.node_id, "claimedAt": job.started_at,
                           "endedAt": None, "outcome": RUNNING_NOW, "error": ""})
        elif job.state == JobState.COMPLETED:
            leases.append({"leaseEpoch": job.settled_lease_epoch, "nodeId": job.settled_node_id,
                           "claimedAt": job.started_at, "endedAt": job.finished_at, "outcome": SETTLED, "error": ""})
        history.append({"jobId": job.pk, "generation": job.generation, "state": job.state,
                        "createdAt": job.created_at, "attempts": leases, "provenance": None})
    _add_provenance(history, {job.pk: job for job in jobs})
    return history


def judged_provenance(submission, history: list[dict]) -> dict | None:
    """The provenance of the verdict the submission shows: its judged generation's."""
    return next((g["provenance"] for g in history if g["generation"] == submission.judged_generation
                 and submission.verdict), None)


def _runtime_label(spec_id: str) -> str:
    return next((pool.spec.description for pool in POOLS.values() if pool.spec.id == spec_id), "")


def _add_provenance(history: list[dict], jobs: dict) -> None:
    """Each judged generation's provenance, from its job row: the node that settled it, its
    runtime spec, the lease, the test data and when it was judged (the settling lease's claim
    → the result). Jobs settled before these were recorded fall back to the node's name now
    and the job's own spec and snapshot."""
    from judging.services.snapshot import judged_data_digest

    judged = [jobs[g["jobId"]] for g in history if g["state"] == JobState.COMPLETED]
    unnamed = {job.settled_node_id for job in judged if not job.settled_node_name and job.settled_node_id}
    names = dict(JudgeNode.objects.filter(pk__in=unnamed).values_list("pk", "name")) if unnamed else {}
    for generation in history:
        job = jobs[generation["jobId"]]
        if job.state != JobState.COMPLETED:
            continue
        spec = job.settled_runtime_spec or job.runtime_spec
        snapshot = job.snapshot or {}
        generation["provenance"] = {
            "nodeId": job.settled_node_id, "nodeName": job.settled_node_name or names.get(job.settled_node_id, ""),
            "runtimeSpec": spec, "runtimeLabel": _runtime_label(spec), "leaseEpoch": job.settled_lease_epoch,
            "manifestId": job.manifest_id, "manifestVersion": snapshot.get("manifestVersion"),
            "manifestDigest": job.settled_manifest_digest or judged_data_digest(snapshot),
            "verdict": (job.result or {}).get("verdict"),
            "claimedAt": job.started_at, "finishedAt": job.finished_at}
