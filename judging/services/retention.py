"""Retention: what the server keeps of finished work, and for how long.

The periodic step `gc` (`kece.periodic.gc_step`) and `manage.py kece_gc` run `gc_run`. Each
kind is taken oldest first in batches of `Policy.batch` rows, each batch its own short
transaction, at most `Policy.batches` batches of a kind per run; a kind whose age is None is
kept forever.

What goes, and what stays because a student's history, an exam's result or a rejudge reads it:

- `job_details` (`KECE_GC_JOB_DETAILS_DAYS` after the job finished): the heavy copies on a
  finished job row — its result's per-case details, compile output and a self-check's items,
  its snapshot's case list and SQL files (the manifest the job names keeps them; a job
  without one keeps its snapshot whole), and the free text a node sent with each lease the
  job lost (`judge_job_attempt.message`, shown nowhere). The job row stays with its state,
  verdict, score, times, error, lease and provenance columns, and so does every attempt row:
  the submission's history (its page, the admin API) is built from them. The submission keeps its
  own result, cases, compile output and code; exam scores and best results are rows of their
  own; a rejudge reads the code and the problem's current manifest. The age is in whole days,
  past what reads a finished job's details: a cross-check copies the original's snapshot
  within the hour (`nodes.cross_checks`), a self-check and a hidden canary are graded from
  the verdict, which stays, as soon as their jobs end.
- `events` (`KECE_GC_EVENTS_DAYS` after they were applied): delivered (DONE) outbox events.
  The rows they derived stay; pending and dead events stay (a dead one needs a person).
  Reconciliation then looks for missing events only among jobs finished within that age
  (`events_kept_since`): older ones it has checked every day before.
- `node_audit`, `node_checks`, `reconcile_reports` (`KECE_GC_AUDIT_DAYS`): node audit rows;
  node check records, except a running check and each node's latest (its page shows it);
  reconciliation reports, except the latest (the failed-work page shows it).
- `blobs` (`KECE_GC_BLOB_GRACE_HOURS`): files of the content store that no manifest and no
  active job names, once older than the grace. See `blobs_sweep` for why a file stored a
  moment ago, or stored again while the sweep runs, is never taken.
"""

import json
import logging
import os
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Callable

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from judging import artifacts
from judging.clock import require_agreeing_clock
from judging.locking import lock_jobs, update_locked_jobs
from judging.models import EventState, JobAttempt, JobState, JudgeJob, Manifest, ReconcileReport, SettlementEvent
from judging.services.snapshot import judged_data_digest, snapshot_digests
from nodes.models import NodeAudit, NodeCheck

logger = logging.getLogger("kece.retention")

SAMPLE = 5
# What a pruned job keeps of its result: the judgement itself.
RESULT_KEPT = ("outcome", "verdict", "score", "timeMs", "memoryKb")
# What it gives up of its snapshot: the manifest's own copies.
SNAPSHOT_DROPPED = ("cases", "sql")


@dataclass(frozen=True)
class Policy:
    """How old each kind must be to go (None: kept forever), and the batches of a run
    (`batches` None: until nothing is left)."""
    job_details: timedelta | None = None
    events: timedelta | None = None
    audit: timedelta | None = None
    blob_grace: timedelta | None = None
    batch: int = 200
    batches: int | None = 10
    # Told each kind's report so far after each of its batches (a long run shows progress).
    on_batch: Callable[["Pruned"], None] | None = None

    @classmethod
    def from_settings(cls, *, batches: int | None = -1, on_batch=None) -> "Policy":
        """The configured policy; `batches` overrides the per-run budget (None: no bound)."""
        def days(value):
            return timedelta(days=value) if value else None

        return cls(job_details=days(settings.KECE_GC_JOB_DETAILS_DAYS), events=days(settings.KECE_GC_EVENTS_DAYS),
                   audit=days(settings.KECE_GC_AUDIT_DAYS),
                   blob_grace=timedelta(hours=settings.KECE_GC_BLOB_GRACE_HOURS)
                   if settings.KECE_GC_BLOB_GRACE_HOURS else None,
                   batch=settings.KECE_GC_BATCH, batches=settings.KECE_GC_BATCHES if batches == -1 else batches,
                   on_batch=on_batch)


@dataclass
class Pruned:
    """One kind's share of a run: how many went (or would go), the bytes they held (text and
    JSON of a row, a file's size), a few of their ids, and whether the run's budget ended
    before the kind did."""
    kind: str
    count: int = 0
    bytes: int = 0
    sample: list = field(default_factory=list)
    more: bool = False
    forever: bool = False  # its age is not set: nothing of it goes

    def add(self, gone: list) -> None:
        self.count += len(gone)
        self.bytes += sum(c.bytes for c in gone)
        self.sample.extend(c.id for c in gone[:SAMPLE - len(self.sample)])


@dataclass(frozen=True)
class Candidate:
    id: object
    cursor: tuple  # where the next batch starts after this one
    bytes: int = 0
    becomes: dict | None = None  # what the row's fields are set to (None: the row is deleted)


def events_kept_since(now):
    """The finish time from which delivered events are still kept (None: all are)."""
    days = settings.KECE_GC_EVENTS_DAYS
    return now - timedelta(days=days) if days else None


def _size(value) -> int:
    if value in (None, "", {}, []):
        return 0
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode())


def _after(cursor, *names):
    """Rows strictly after `cursor` in the order of `names` (a keyset page)."""
    if cursor is None:
        return Q()
    if len(names) == 1:
        return Q(**{f"{names[0]}__gt": cursor[0]})
    first, second = names
    return Q(**{f"{first}__gt": cursor[0]}) | Q(**{first: cursor[0], f"{second}__gt": cursor[1]})


def _in_batches(kind: str, policy: Policy, *, candidates, take, dry_run: bool) -> Pruned:
    """`take` each batch of `candidates(after, limit)` until a batch comes back short or the
    budget is spent. A dry run takes nothing and pages on, so it sees what a run would take."""
    report, after, runs = Pruned(kind), None, 0
    while policy.batches is None or runs < policy.batches:
        batch = candidates(after, policy.batch)
        if batch:
            report.add(batch if dry_run else take(batch))
            after = batch[-1].cursor
            if policy.on_batch is not None:
                policy.on_batch(report)
        runs += 1
        if len(batch) < policy.batch:
            return report
    report.more = True
    return report


# --- finished jobs' details -----------------------------------------------------------------

def _slim_result(result):
    if not isinstance(result, dict):
        return result
    return {key: value for key, value in result.items() if key in RESULT_KEPT}


def _slim_snapshot(snapshot, manifest_id):
    if not isinstance(snapshot, dict) or manifest_id is None:
        return snapshot
    return {key: value for key, value in snapshot.items() if key not in SNAPSHOT_DROPPED}


def _slim(job) -> tuple[dict, int]:
    """What a job's details become, and the bytes that saves."""
    becomes = {"result": _slim_result(job["result"]), "snapshot": _slim_snapshot(job["snapshot"], job["manifest_id"])}
    saved = sum(_size(job[name]) - _size(value) for name, value in becomes.items())
    if job["state"] == JobState.COMPLETED and not job["settled_manifest_digest"]:
        # Judged before provenance was recorded: its history works the digest of the test data
        # out from the snapshot's cases, which go, so the digest is recorded first.
        becomes["settled_manifest_digest"] = judged_data_digest(job["snapshot"] or {})
    return becomes, saved


def job_details_prune(*, now, policy: Policy, dry_run: bool = False) -> Pruned:
    """Take the heavy copies off jobs finished more than `policy.job_details` ago (the module
    docstring says which). Each batch locks its jobs (by key, through the lock helper) and
    re-checks them: a finished job never changes again, but the check costs nothing."""
    if policy.job_details is None:
        return Pruned("job_details", forever=True)
    cutoff = now - policy.job_details
    # The judge_job_prunable index: unpruned finished jobs by finish time.
    due = JudgeJob.objects.filter(details_pruned_at__isnull=True, finished_at__lt=cutoff,
                                  state__in=JobState.TERMINAL)

    def candidates(after, limit):
        jobs = list(due.filter(_after(after, "finished_at", "id")).order_by("finished_at", "id")
                    .values("id", "finished_at", "state", "result", "snapshot", "manifest_id",
                            "settled_manifest_digest")[:limit])
        messages = {}
        for job_id, message in JobAttempt.objects.filter(job_id__in=[j["id"] for j in jobs]).exclude(
                message="").values_list("job_id", "message"):
            messages[job_id] = messages.get(job_id, 0) + _size(message)
        found = []
        for job in jobs:
            becomes, saved = _slim(job)
            found.append(Candidate(job["id"], (job["finished_at"], job["id"]), saved + messages.get(job["id"], 0),
                                   becomes))
        return found

    def take(batch):
        # What each job becomes was worked out from the rows read above, outside the
        # transaction: a finished job's details never change, so under the lock only its
        # state and mark are read again.
        with transaction.atomic(durable=True):
            jobs = lock_jobs([c.id for c in batch], names=("id", "state", "details_pruned_at"))
            pruned = []
            for candidate in batch:
                job = jobs.get(candidate.id)
                if job is None or job.state not in JobState.TERMINAL or job.details_pruned_at is not None:
                    continue
                # Not updated_at: the node's page lists its recent errors by it.
                update_locked_jobs([job.pk], details_pruned_at=now, **candidate.becomes)
                pruned.append(job.pk)
            # A finished job takes no lease again, so no attempt row of it is written meanwhile.
            JobAttempt.objects.filter(job_id__in=pruned).exclude(message="").update(message="")
        pruned = set(pruned)
        return [c for c in batch if c.id in pruned]

    return _in_batches("job_details", policy, candidates=candidates, take=take, dry_run=dry_run)


# --- rows deleted outright ------------------------------------------------------------------

def _delete_in_batches(kind: str, policy: Policy, *, due, order: tuple, size, dry_run: bool) -> Pruned:
    """Delete the rows of `due` in batches in `order` (ending with the key). The DELETE names
    the batch by key and repeats `due`'s conditions, so a row that changed since it was read
    (an event made due again) stays; no lock is taken beyond the DELETE's own."""
    key = order[-1]

    def candidates(after, limit):
        rows = due.filter(_after(after, *order)).order_by(*order).values(*order, *size)[:limit]
        return [Candidate(row[key], tuple(row[name] for name in order), sum(_size(row[n]) for n in size))
                for row in rows]

    def take(batch):
        keys = [c.id for c in batch]
        with transaction.atomic(durable=True):
            _, deleted = due.filter(pk__in=keys).delete()
        count = deleted.get(due.model._meta.label, 0)
        if count == len(batch):
            return batch
        # Fewer: another run (two gc commands, or one beside the periodic step) took the rest,
        # or a row changed. The count is this DELETE's own; of the rows now gone, which were
        # its own is not known, so the bytes are those of as many of them.
        left = set(due.model.objects.filter(pk__in=keys).values_list("pk", flat=True))
        return [c for c in batch if c.id not in left][:count]

    return _in_batches(kind, policy, candidates=candidates, take=take, dry_run=dry_run)


def events_prune(*, now, policy: Policy, dry_run: bool = False) -> Pruned:
    if policy.events is None:
        return Pruned("events", forever=True)
    cutoff = now - policy.events
    # A delivered event was due before it was applied: the bound on next_attempt_at lets the
    # judge_event_due index (state, next_attempt_at, id) find them.
    due = SettlementEvent.objects.filter(state=EventState.DONE, next_attempt_at__lt=cutoff, applied_at__lt=cutoff)
    return _delete_in_batches("events", policy, due=due, order=("next_attempt_at", "id"),
                              size=("payload", "last_error"), dry_run=dry_run)


def sessions_prune(*, now, policy: Policy, dry_run: bool = False) -> Pruned:
    """Sign-ins past their expiry (`django_session`): of no use to anyone, and Django deletes
    none by itself (its `clearsessions` does, in one statement)."""
    from django.contrib.sessions.models import Session

    return _delete_in_batches("sessions", policy, due=Session.objects.filter(expire_date__lt=now),
                              order=("expire_date", "session_key"), size=("session_data",), dry_run=dry_run)


def audit_prune(*, now, policy: Policy, dry_run: bool = False) -> list[Pruned]:
    """Node audit rows, node check records and reconciliation reports older than the age.
    Append-only logs: their ids follow their times, so each is walked by key."""
    kinds = ("node_audit", "node_checks", "reconcile_reports")
    if policy.audit is None:
        return [Pruned(kind, forever=True) for kind in kinds]
    cutoff = now - policy.audit
    newer_check = NodeCheck.objects.filter(node_id=OuterRef("node_id"), pk__gt=OuterRef("pk"))
    due = {
        "node_audit": (NodeAudit.objects.filter(created_at__lt=cutoff), ("before", "after")),
        "node_checks": (NodeCheck.objects.filter(started_at__lt=cutoff).exclude(status=NodeCheck.Status.RUNNING)
                        .filter(Exists(newer_check)), ("items",)),
        "reconcile_reports": (ReconcileReport.objects.filter(created_at__lt=cutoff).filter(
            Exists(ReconcileReport.objects.filter(pk__gt=OuterRef("pk")))), ("findings", "repaired")),
    }
    return [_delete_in_batches(kind, policy, due=rows, order=("id",), size=size, dry_run=dry_run)
            for kind, (rows, size) in due.items()]


# --- the content store ----------------------------------------------------------------------

# A file set aside by a sweep, deleted next unless it was stored again meanwhile.
ASIDE = ".doomed-"


def referenced_digests() -> set[str]:
    """Every file a manifest names (manifests are never deleted: old jobs name them), and every
    file an active job may download (a submission's source is served from its row and never
    stored, but a diagnostic job's is a file of the store)."""
    found = set()
    for manifest in Manifest.objects.only("cases", "sql").iterator(chunk_size=500):
        found |= manifest.digests()
    for snapshot in JudgeJob.objects.filter(state__in=JobState.ACTIVE).values_list("snapshot", flat=True).iterator(
            chunk_size=500):
        found |= snapshot_digests(snapshot or {})
    return found


def _store_entries():
    """Every entry of the store's two-level fan-out folders (`ab/cd/<digest>`), in order."""
    root = artifacts.root()
    if not root.is_dir():
        return
    for top in sorted(os.scandir(root), key=lambda e: e.name):
        if len(top.name) != 2 or not top.is_dir():
            continue
        for sub in sorted(os.scandir(top.path), key=lambda e: e.name):
            if len(sub.name) == 2 and sub.is_dir():
                yield from sorted(os.scandir(sub.path), key=lambda e: e.name)


def _set_aside(path, digest: str):
    """Rename the file out of its name (one atomic step): a store from now on finds it gone
    and writes it anew."""
    aside = path.with_name(f"{ASIDE}{digest}-{uuid.uuid4().hex[:12]}")
    os.rename(path, aside)
    return aside


def _sweep_file(entry, *, cutoff: float, referenced: set, dry_run: bool) -> int | None:
    """The bytes freed by sweeping one store entry, or None if it stays."""
    name = entry.name
    try:
        stat = entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None
    if name.startswith(ASIDE):
        # A sweep that stopped half-way: its decision is taken again below, by the same rules.
        digest = name[len(ASIDE):len(ASIDE) + 64]
        target = artifacts.path_for(digest) if artifacts.is_digest(digest) else None
        if target is not None and not target.exists() and (digest in referenced or stat.st_mtime >= cutoff):
            if not dry_run:
                os.replace(entry.path, target)
            return None
    elif name.startswith(artifacts.INCOMING):
        if stat.st_mtime >= cutoff:
            return None  # being written, or a crashed write younger than the grace
    elif not artifacts.is_digest(name) or name in referenced or stat.st_mtime >= cutoff:
        return None
    if dry_run:
        return stat.st_size
    # FileNotFoundError: another sweep (the command beside the periodic step) decided first.
    try:
        if artifacts.is_digest(name):
            aside = _set_aside(artifacts.path_for(name), name)
            if os.stat(aside).st_mtime >= cutoff:
                # Stored again between the look and the rename: it stays (same bytes, so a
                # copy written meanwhile may be replaced by it).
                os.replace(aside, artifacts.path_for(name))
                return None
            os.unlink(aside)
        else:
            os.unlink(entry.path)
    except FileNotFoundError:
        return None
    return stat.st_size


def blobs_sweep(*, now, policy: Policy, dry_run: bool = False) -> Pruned:
    """Delete the store's files that nothing names and that are older than the grace.

    Mark, grace, sweep. The marks are the names read from the tables (`referenced_digests`),
    read after `now`; a file is old if its modification time is before `now - grace`, and
    storing a file (`artifacts.store_bytes`) sets that time even when the file is already
    there. Whoever stores a file and then commits the manifest or job that names it, within
    the grace, is safe:
    - stored before the sweep renames the file: its time is then at least the store's, so an
      old time means the store, and the commit within the grace after it, came before `now`,
      hence before the marks were read: the file is marked;
    - stored after the rename: the store finds no file and writes it anew; only the renamed
      one goes. Between the look and the rename a store may still touch the file: its time is
      read again after the rename, and a fresh one is put back.
    A file is renamed aside before it is deleted, so no reader ever sees half a decision; an
    aside file left by a sweep that stopped is decided again by the next one. A crashed
    write's temporary file goes once it is older than the grace. At most
    `batch × batches` files go per run."""
    if policy.blob_grace is None:
        return Pruned("blobs", forever=True)
    report = Pruned("blobs")
    cutoff = (now - policy.blob_grace).timestamp()
    referenced = referenced_digests()
    budget = None if policy.batches is None else policy.batch * policy.batches
    for entry in _store_entries():
        if budget is not None and report.count >= budget:
            report.more = True
            break
        freed = _sweep_file(entry, cutoff=cutoff, referenced=referenced, dry_run=dry_run)
        if freed is not None:
            report.add([Candidate(entry.name, (), freed)])
    return report


# --- a run -----------------------------------------------------------------------------------

def gc_run(*, now, policy: Policy, dry_run: bool = False) -> list[Pruned]:
    """Prune every kind by `policy`; a dry run changes nothing and reports what would go.
    Refused (503) on a host whose clock disagrees with the database's: rows and files would
    be aged by a wrong `now` (`judging.clock`)."""
    require_agreeing_clock()
    reports = [job_details_prune(now=now, policy=policy, dry_run=dry_run),
               events_prune(now=now, policy=policy, dry_run=dry_run),
               *audit_prune(now=now, policy=policy, dry_run=dry_run),
               sessions_prune(now=now, policy=policy, dry_run=dry_run),
               blobs_sweep(now=now, policy=policy, dry_run=dry_run)]
    if not dry_run and any(r.count for r in reports):
        logger.info("retention pass", extra={r.kind: r.count for r in reports if r.count})
    return reports
