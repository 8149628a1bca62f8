"""The lab's history checker, in the manner of Jepsen's queue checks.

A history is a list of operations (dicts with a `kind`), gathered from the users' client,
the agents, the fault proxy, and, at the end of a scenario, the database's own record of
what settled:

  submit      {key, status, submission}  one attempt of a submission (key: the client's
              Idempotency-Key); status None when no answer came (a cut connection, a timeout)
  claim       {node, job, epoch}         a lease an agent received
  result      {node, job, epoch, status, error}  the server's answer to an agent's result
  settlement  {job, submission, state, epoch, node, events}  from the database after the
              drain: the job's settled lease (epoch, node) and how many settlement events
              (the outbox's problem-stats rows) it wrote

The check: every accepted submission (answered 202, or 200 to a retry of its key) settles exactly once; nothing settles
that was never submitted; and what the server told the agents agrees with what took effect.
  lost        accepted, never settled
  duplicated  settled more than once (two outbox events, or two results answered `settled`
              for different leases), or one submission key accepted as two submissions
  unexpected  a settlement nobody submitted (beyond the attempts left without an answer,
              which may or may not have been committed), a result confirmed (`settled`,
              `duplicate`) for a lease that is not the one that took effect, a result
              refused (`lease_lost`, `superseded`) for the very lease that took effect, a
              settled result from a lease no agent was given, or a result settled under a
              lease after a later lease of the same job was granted (a job is leased again
              only once its lease has ended, so its old holder's result must not count)
"""

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

CONFIRMED = {"settled", "duplicate"}
REFUSED = {"lease_lost", "superseded"}


@dataclass
class Figures:
    attempted: int = 0
    accepted: int = 0
    settled_once: int = 0
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    problems: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected)

    def line(self) -> str:
        return (f"attempted {self.attempted}, accepted {self.accepted}, settled once {self.settled_once},"
                f" lost {self.lost}, duplicated {self.duplicated}, unexpected {self.unexpected}")


def check(history: list[dict]) -> Figures:
    figures = Figures()
    submits = [op for op in history if op["kind"] == "submit"]
    settlements = [op for op in history if op["kind"] == "settlement"]
    results = [op for op in history if op["kind"] == "result"]
    claims = {(op["node"], op["job"], op["epoch"]) for op in history if op["kind"] == "claim"}
    newest_lease: dict[int, int] = defaultdict(int)
    for _node, job, epoch in claims:
        newest_lease[job] = max(newest_lease[job], epoch)

    accepted_ids: dict[str, set] = defaultdict(set)
    answered = set()
    for op in submits:
        if op.get("status") is not None and op["status"] < 500:
            answered.add(op["key"])
        if op.get("status") in (200, 202):  # 200: a retry of the same key, the original submission
            accepted_ids[op["key"]].add(op["submission"])
    keys = {op["key"] for op in submits}
    figures.attempted = len(keys)
    figures.accepted = len(accepted_ids)
    for key, ids in accepted_ids.items():
        if len(ids) > 1:
            figures.duplicated += 1
            figures.problems.append(f"duplicated: key {key} accepted as submissions {sorted(ids)}")
    indeterminate = len(keys - answered)

    job_of = {op["job"]: op for op in settlements}
    settled_leases = {op["job"]: (op["epoch"], op["node"]) for op in settlements if op["events"]}
    by_submission: dict[int, list] = defaultdict(list)
    for op in settlements:
        by_submission[op["submission"]].append(op)
    confirmed: dict[int, set] = defaultdict(set)  # job -> leases answered `settled`
    for op in results:
        lease = (op["epoch"], op["node"])
        took_effect = settled_leases.get(op["job"])
        if op.get("status") == "settled":
            confirmed[op["job"]].add(lease)
            if (op["node"], op["job"], op["epoch"]) not in claims:
                figures.unexpected += 1
                figures.problems.append(f"unexpected: job {op['job']} settled by node {op['node']} under lease"
                                        f" {op['epoch']}, which no agent was given")
            if newest_lease[op["job"]] > op["epoch"]:
                figures.unexpected += 1
                figures.problems.append(f"unexpected: job {op['job']} settled by node {op['node']} under lease"
                                        f" {op['epoch']} after lease {newest_lease[op['job']]} was granted")
        if op.get("status") in CONFIRMED and took_effect != lease:
            figures.unexpected += 1
            figures.problems.append(f"unexpected: job {op['job']}: node {op['node']}'s result under lease"
                                    f" {op['epoch']} was answered {op['status']}, but the lease that took effect"
                                    f" is {took_effect}")
        if op.get("error") in REFUSED and took_effect == lease:
            figures.unexpected += 1
            figures.problems.append(f"unexpected: job {op['job']}: node {op['node']}'s result under lease"
                                    f" {op['epoch']} was refused ({op['error']}) yet took effect")

    for submission in sorted({sid for ids in accepted_ids.values() for sid in ids}):
        jobs = by_submission.get(submission, [])
        events = sum(op["events"] for op in jobs)
        answers = sum(len(confirmed[op["job"]]) for op in jobs)
        times = max(events, answers)
        if times == 0:
            figures.lost += 1
            states = ", ".join(f"job {op['job']} {op['state']}" for op in jobs) or "no job"
            figures.problems.append(f"lost: submission {submission} was accepted and never settled ({states})")
        elif times > 1:
            figures.duplicated += 1
            figures.problems.append(f"duplicated: submission {submission} settled {times} times"
                                    f" ({events} outbox events, {answers} results answered settled)")
        else:
            figures.settled_once += 1

    accepted_all = {sid for ids in accepted_ids.values() for sid in ids}
    strangers = sorted(sid for sid, jobs in by_submission.items()
                       if sid not in accepted_all and any(op["events"] for op in jobs))
    if len(strangers) > indeterminate:
        figures.unexpected += len(strangers) - indeterminate
        figures.problems.append(f"unexpected: submissions {strangers} settled, {len(strangers)} not accepted"
                                f" against {indeterminate} attempts left without an answer")
    return figures


def read(paths) -> list[dict]:
    history = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                history.append(json.loads(line))
    return history


def settlements(submission_ids=None) -> list[dict]:
    """The database's record, as `settlement` operations: every judge job (of the given
    submissions), its state, its settled lease and its outbox events. Needs Django set up."""
    from django.db.models import Count, Q

    from judging.models import JobKind, JudgeJob, SettlementEvent, SubmissionType
    from judging.services.outcomes import PROBLEM_STATS

    # The students' submissions the checker follows are ALGO ones: an SQL submission's id is
    # of another sequence, and the same number names another submission.
    jobs = JudgeJob.objects.filter(kind=JobKind.JUDGE, submission_type=SubmissionType.ALGO)
    if submission_ids is not None:
        jobs = jobs.filter(submission_id__in=list(submission_ids))
    events = dict(SettlementEvent.objects.filter(event_type=PROBLEM_STATS, job__in=jobs)
                  .values("job").annotate(n=Count("id", filter=Q())).values_list("job", "n"))
    return [{"kind": "settlement", "job": job.pk, "submission": job.submission_id, "state": job.state,
             "epoch": job.settled_lease_epoch, "node": job.settled_node_id, "events": events.get(job.pk, 0)}
            for job in jobs.only("id", "submission_id", "state", "settled_lease_epoch", "settled_node_id")]
