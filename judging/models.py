from django.conf import settings
from django.db import models

from pools.registry import POOL_CHOICES


class ProblemKind(models.TextChoices):
    ALGO = "ALGO"
    SQL = "SQL"


class ProblemVisibility(models.TextChoices):
    """Who sees a problem outside an exam (`judging.visibility`). Whatever this says, an
    exam's problems are seen only by admins and, from its start, its participants until the
    exam ends; afterwards this decides."""
    PUBLIC = "PUBLIC"  # listed, shown and open to practice for everyone
    EXAM_ONLY = "EXAM_ONLY"  # only through the exams that hold it, to their participants
    HIDDEN = "HIDDEN"  # admins and teachers only


class Problem(models.Model):
    slug = models.SlugField(max_length=100, unique=True)
    title = models.CharField(max_length=200)
    kind = models.CharField(max_length=8, choices=ProblemKind.choices)
    # Markdown, rendered and sanitised for the problem page (judging.markdown).
    statement = models.TextField(blank=True, default="")
    # Example cases shown on the problem page: [{input, output}] as text. Only what the
    # package names as samples; the judge's test data stays private.
    samples = models.JSONField(default=list, blank=True)
    # A built-in canary of the node self-check (nodes/canary/): judged only by diagnostic
    # jobs, never listed, submitted to or counted for students.
    is_canary = models.BooleanField(default=False)
    visibility = models.CharField(max_length=16, choices=ProblemVisibility.choices, default=ProblemVisibility.PUBLIC)
    # A deleted problem takes no submissions; its submissions are deleted (`problem_delete`).
    deleted_at = models.DateTimeField(null=True, blank=True)
    current_manifest = models.ForeignKey(
        "Manifest", null=True, blank=True, on_delete=models.PROTECT, db_constraint=False, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "judge_problem"

    def __str__(self):
        return self.slug


class Manifest(models.Model):
    """One immutable version of a problem's test data and limits.

    `cases` is [{ordinal, weight, input: {digest, bytes}, output: {digest, bytes}}] and
    `sql` is null or {dialect, ordered, schema, seed, answer, check}, every file as
    {digest, bytes} in the content store. Rows are never updated after creation.
    """

    problem = models.ForeignKey(Problem, on_delete=models.PROTECT, db_constraint=False, related_name="manifests")
    version = models.PositiveIntegerField()
    time_limit_ms = models.PositiveIntegerField()
    memory_limit_mb = models.PositiveIntegerField()
    output_limit_kb = models.PositiveIntegerField(default=65536)
    languages = models.JSONField(default=list)
    cases = models.JSONField(default=list)
    sql = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "judge_manifest"
        constraints = [models.UniqueConstraint(fields=["problem", "version"], name="uniq_manifest_version")]

    def digests(self) -> set[str]:
        found = {f[part]["digest"] for f in self.cases for part in ("input", "output")}
        if self.sql:
            found |= {v["digest"] for v in self.sql.values() if isinstance(v, dict) and "digest" in v}
        return found


class LessonPractice(models.Model):
    """A practice set inside a lesson; the best score per student and problem counts."""

    title = models.CharField(max_length=200)
    lesson = models.ForeignKey("judging.Lesson", null=True, blank=True, on_delete=models.PROTECT,
                               db_constraint=False, related_name="practices")
    problems = models.ManyToManyField(Problem, related_name="lesson_practices", blank=True)
    revision = models.PositiveIntegerField(default=1)
    deleted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "lesson_practice"


class SubmissionType(models.TextChoices):
    ALGO = "ALGO"
    SQL = "SQL"


class Verdict(models.TextChoices):
    AC = "AC"
    WA = "WA"
    TLE = "TLE"
    MLE = "MLE"
    RE = "RE"
    CE = "CE"
    OLE = "OLE"


# The verdicts as a set: `Verdict.values` builds a new list on every read, and a result's
# check reads it once per case.
VERDICTS = frozenset(Verdict.values)


class BaseSubmission(models.Model):
    """What a user submitted, and the effective result of its current judge job.

    Code and SQL submissions live in two tables whose ids may collide, so a submission is
    always named by type + id. The result columns are written only by the settle of the
    job that `current_judge_job` points at.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, db_constraint=False,
                             db_index=False, related_name="+")
    problem = models.ForeignKey(Problem, on_delete=models.PROTECT, db_constraint=False, related_name="+")
    language = models.CharField(max_length=16, choices=POOL_CHOICES)
    source_digest = models.CharField(max_length=64)
    source_bytes = models.PositiveIntegerField()
    lesson_practice = models.ForeignKey(
        LessonPractice, null=True, blank=True, on_delete=models.PROTECT, db_constraint=False, related_name="+"
    )
    # An exam submission: ACM ones are judged at once, OI ones only at hand-in (no job until then).
    exam = models.ForeignKey("judging.Exam", null=True, blank=True, on_delete=models.PROTECT, db_constraint=False,
                             related_name="+")
    # Not a database constraint: the pointer is written under the submission lock, and a
    # foreign-key check would take a hidden lock on the job row.
    current_judge_job = models.ForeignKey(
        "JudgeJob", null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False, db_index=False, related_name="+"
    )
    verdict = models.CharField(max_length=16, null=True, blank=True)
    score = models.PositiveSmallIntegerField(null=True, blank=True)
    time_ms = models.PositiveIntegerField(null=True, blank=True)
    memory_kb = models.PositiveIntegerField(null=True, blank=True)
    cases = models.JSONField(default=list, blank=True)
    compile_output = models.TextField(blank=True, default="")
    judged_generation = models.PositiveIntegerField(null=True, blank=True)
    judged_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True


class Submission(BaseSubmission):
    TYPE = SubmissionType.ALGO
    code = models.TextField()

    class Meta:
        db_table = "submission"
        indexes = [models.Index(fields=["user", "problem"], name="submission_user_problem")]


class DbSubmission(BaseSubmission):
    TYPE = SubmissionType.SQL
    code = models.TextField()

    class Meta:
        db_table = "db_submission"
        indexes = [models.Index(fields=["user", "problem"], name="db_submission_user_problem")]


SUBMISSION_MODELS = {SubmissionType.ALGO: Submission, SubmissionType.SQL: DbSubmission}


class JobKind(models.TextChoices):
    JUDGE = "JUDGE"
    DIAGNOSTIC = "DIAGNOSTIC"


class JobState(models.TextChoices):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @classmethod
    def terminal(cls):
        return (cls.COMPLETED, cls.FAILED, cls.CANCELLED)


JobState.ACTIVE = (JobState.QUEUED, JobState.RUNNING)
JobState.TERMINAL = JobState.terminal()


class PriorityClass(models.TextChoices):
    """Which work a claim takes first (`judging.priority`): exam answers, then practice,
    then bulk rejudges."""
    EXAM = "EXAM"
    PRACTICE = "PRACTICE"
    REJUDGE = "REJUDGE"


class JobPhase(models.TextChoices):
    COMPILING = "COMPILING"
    JUDGING = "JUDGING"


class JudgeJob(models.Model):
    """One attempt-carrying unit of judging work, leased to one node at a time.

    `lease_epoch` grows by one on every claim; only the holder of the current epoch, in
    the node's current session and before `lease_until`, may renew or settle it. The
    settled_* columns remember which lease settled it with which result digest, so a
    repeated post is answered `duplicate` and a different one `result_conflict`.
    """

    kind = models.CharField(max_length=16, choices=JobKind.choices, default=JobKind.JUDGE)
    submission_type = models.CharField(max_length=16)
    submission_id = models.BigIntegerField()
    generation = models.PositiveIntegerField(default=1)
    pool = models.CharField(max_length=16, choices=POOL_CHOICES)
    runtime_spec = models.CharField(max_length=64)
    manifest = models.ForeignKey(Manifest, null=True, blank=True, on_delete=models.PROTECT, db_constraint=False,
                                 db_index=False, related_name="+")
    snapshot = models.JSONField(default=dict)
    lesson_practice = models.ForeignKey(LessonPractice, null=True, blank=True, on_delete=models.PROTECT,
                                        db_constraint=False, db_index=False, related_name="+")
    # A diagnostic job may only be claimed by the node it checks; so may a hidden judge job
    # (a canary for that node, a cross-check for a peer of the node that judged the original).
    bound_node = models.ForeignKey("nodes.JudgeNode", null=True, blank=True, on_delete=models.PROTECT,
                                   db_constraint=False, db_index=False, related_name="+")
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED)
    available_at = models.DateTimeField()
    priority_class = models.CharField(max_length=16, choices=PriorityClass.choices, default=PriorityClass.PRACTICE)
    # The claim order: available_at moved earlier by the class's lead (`judging.priority`),
    # written with available_at. Never later than available_at, so the claim's range on it
    # is implied by "due" and the index serves both the range and the order.
    claim_key = models.DateTimeField()
    # The submitter, for the per-user share of the practice queue (null for diagnostics).
    user_id = models.BigIntegerField(null=True, blank=True)
    node = models.ForeignKey("nodes.JudgeNode", null=True, blank=True, on_delete=models.PROTECT,
                             db_constraint=False, db_index=False, related_name="+")
    host_group = models.ForeignKey("nodes.JudgeHostGroup", null=True, blank=True, on_delete=models.PROTECT,
                                   db_constraint=False, db_index=False, related_name="+")
    session_epoch = models.PositiveIntegerField(null=True, blank=True)
    # The node that held the latest lease; kept after requeue so a node's recent errors
    # can be listed.
    last_node_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    # The node whose INFRA_ERROR sent the job back while another node served the pool: its
    # claims pass the job by for one claim wait after it is due, so the other node takes it.
    avoid_node_id = models.BigIntegerField(null=True, blank=True)
    lease_epoch = models.PositiveIntegerField(default=0)
    lease_until = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    # The job whose result post carried the claim that leased this one, until the node
    # renews it: a repeated post of that result (its answer was lost) gets this job again
    # instead of leaving it to wait out its lease.
    carried_by_job_id = models.BigIntegerField(null=True, blank=True)
    progress_phase = models.CharField(max_length=16, blank=True, default="")
    progress_testcase = models.PositiveIntegerField(null=True, blank=True)
    result_digest = models.CharField(max_length=64, blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    error = models.CharField(max_length=64, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    wait_reason = models.CharField(max_length=32, blank=True, default="")
    settled_lease_epoch = models.PositiveIntegerField(null=True, blank=True)
    settled_node_id = models.BigIntegerField(null=True, blank=True)
    settled_digest = models.CharField(max_length=64, blank=True, default="")
    settled_status = models.CharField(max_length=16, blank=True, default="")
    # The verdict's provenance, written with the verdict under the settling lease: the node's
    # name and reported runtime spec then (a node may be renamed or upgraded later), and the
    # digest of the test data it was given (`judging.services.snapshot.judged_data_digest`).
    settled_node_name = models.CharField(max_length=100, blank=True, default="")
    settled_runtime_spec = models.CharField(max_length=64, blank=True, default="")
    settled_manifest_digest = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # When retention took the job's heavy copies (`judging.services.retention`): the result's
    # per-case details and output, the snapshot's case list (its manifest keeps them).
    details_pruned_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "judge_job"
        constraints = [
            models.UniqueConstraint(
                fields=["submission_type", "submission_id", "generation"], name="uniq_job_submission_generation"
            )
        ]
        indexes = [
            # Claims: the pool's queued jobs in claim order (SKIP LOCKED walks this).
            models.Index(fields=["pool", "state", "claim_key", "id"], name="judge_job_claim"),
            # A user's active practice jobs in a pool (the fair share at submit).
            models.Index(fields=["user_id", "pool", "state"], name="judge_job_user_active"),
            # Reaper: running jobs by lease deadline.
            models.Index(fields=["state", "lease_until", "id"], name="judge_job_reap"),
            # Slot counts under the node and host-group locks.
            models.Index(fields=["node", "state"], name="judge_job_node_state"),
            models.Index(fields=["host_group", "state"], name="judge_job_group_state"),
            # Capacity advice: a pool's arrivals in a recent window (`judging.capacity`).
            # Both columns are written once, at insert, so the index costs no claim or settle.
            models.Index(fields=["pool", "created_at"], name="judge_job_arrivals"),
            # Retention: the finished jobs whose details are still whole, oldest first.
            models.Index(fields=["details_pruned_at", "finished_at"], name="judge_job_prunable"),
        ]

    @property
    def submission_ref(self):
        return (self.submission_type, self.submission_id)

    @property
    def hidden(self) -> bool:
        """A judge job bound to one node: a hidden canary or a cross-check (`nodes`), judged
        for the server's own sake. It writes no settlement event and is counted nowhere."""
        return self.kind == JobKind.JUDGE and self.bound_node_id is not None


class AttemptOutcome(models.TextChoices):
    REQUEUED = "REQUEUED"  # back to the queue: released, an infrastructure error, a lease lost
    FAILED = "FAILED"  # the job's last allowed attempt: the submission shows SYSTEM_ERROR
    CANCELLED = "CANCELLED"  # superseded by a rejudge, or deleted, while it ran


class JobAttempt(models.Model):
    """One lease of a job that ended without settling it, appended when it ends and never
    changed: a reclaim after the lease ran out, a release, an infrastructure error, a session
    or a revoke that took the lease, a cancellation. The lease that settles the job is on the
    job row itself (`settled_*`, `started_at`, `finished_at`), so a job judged at the first try
    costs no row here."""

    job = models.ForeignKey(JudgeJob, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False,
                            related_name="+")
    lease_epoch = models.PositiveIntegerField()
    node_id = models.BigIntegerField(null=True, blank=True)
    session_epoch = models.PositiveIntegerField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)
    error = models.CharField(max_length=64, blank=True, default="")
    message = models.TextField(blank=True, default="")

    class Meta:
        db_table = "judge_job_attempt"
        # A lease ends once: a second row for it would be a bug, refused by the database.
        constraints = [models.UniqueConstraint(fields=["job", "lease_epoch"], name="uniq_job_attempt")]


class ReconcileReport(models.Model):
    """What a reconciliation found and repaired (`judging.services.reconcile`): per check its
    count and a sample of ids; the console shows the last one."""

    created_at = models.DateTimeField(db_index=True)
    repair = models.BooleanField(default=False)
    findings = models.JSONField(default=dict)
    repaired = models.JSONField(default=dict)

    class Meta:
        db_table = "judge_reconcile_report"

    @property
    def total(self) -> int:
        return sum(found.get("count", 0) for found in self.findings.values())


class EventState(models.TextChoices):
    PENDING = "PENDING"
    DONE = "DONE"
    DEAD = "DEAD"


class SettlementEvent(models.Model):
    """Outbox row written in a job's terminal transaction; applied once by the dispatcher."""

    job = models.ForeignKey(JudgeJob, on_delete=models.PROTECT, db_constraint=False, db_index=False, related_name="+")
    event_type = models.CharField(max_length=48)
    payload = models.JSONField(default=dict)
    state = models.CharField(max_length=8, choices=EventState.choices, default=EventState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_error = models.TextField(blank=True, default="")
    applied_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "judge_settlement_event"
        constraints = [models.UniqueConstraint(fields=["job", "event_type"], name="uniq_event_job_type")]
        indexes = [models.Index(fields=["state", "next_attempt_at", "id"], name="judge_event_due")]


class ProblemResult(models.Model):
    """Per user and problem: the best effective result and the first accepted submission."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, db_constraint=False,
                             related_name="+")
    problem = models.ForeignKey(Problem, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    best_score = models.PositiveSmallIntegerField(default=0)
    best_verdict = models.CharField(max_length=16, blank=True, default="")
    best_submission_type = models.CharField(max_length=16, blank=True, default="")
    best_submission_id = models.BigIntegerField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "judge_problem_result"
        constraints = [models.UniqueConstraint(fields=["user", "problem"], name="uniq_problem_result")]


class FirstAccepted(models.Model):
    """One row per user and problem they have solved: the daily-accepted statistics count
    these, so a replayed event or a second AC never counts twice, and a rejudge that turns
    the only AC into a non-AC removes it."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, db_constraint=False,
                             related_name="+")
    problem = models.ForeignKey(Problem, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    submission_type = models.CharField(max_length=16)
    submission_id = models.BigIntegerField()
    accepted_at = models.DateTimeField()

    class Meta:
        db_table = "judge_first_accepted"
        constraints = [models.UniqueConstraint(fields=["user", "problem"], name="uniq_first_accepted")]
        # A lesson's daily chart: its problems' first solutions since a day, not their whole
        # history (`judging.statistics`).
        indexes = [models.Index(fields=["problem", "accepted_at"], name="first_accepted_daily")]


class PracticeBest(models.Model):
    """A student's best score on one problem of one lesson practice."""

    practice = models.ForeignKey(LessonPractice, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, db_constraint=False,
                             related_name="+")
    problem = models.ForeignKey(Problem, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    best_score = models.PositiveSmallIntegerField(default=0)
    best_submission_type = models.CharField(max_length=16, blank=True, default="")
    best_submission_id = models.BigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "lesson_practice_best"
        constraints = [models.UniqueConstraint(fields=["practice", "user", "problem"], name="uniq_practice_best")]


class RejudgeState(models.TextChoices):
    RUNNING = "RUNNING"
    DONE = "DONE"
    CANCELLED = "CANCELLED"


class RejudgeOperation(models.Model):
    """A bulk rejudge: the submissions chosen when it was asked for, enqueued a batch at a
    time at REJUDGE class by the periodic step (`judging.services.bulk_rejudge`)."""

    state = models.CharField(max_length=16, choices=RejudgeState.choices, default=RejudgeState.RUNNING)
    # What was asked for, as the API's body: {problemId} | {nodeId, since, until} | {submissions}.
    selector = models.JSONField(default=dict)
    total = models.PositiveIntegerField(default=0)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     db_constraint=False, related_name="+")
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "judge_rejudge"
        indexes = [models.Index(fields=["state", "id"], name="judge_rejudge_state")]


class RejudgeItem(models.Model):
    """One submission of a bulk rejudge: `job` is the generation it queued (null until then),
    `verdict_before` the verdict it had, so the operation can count the verdicts that moved."""

    operation = models.ForeignKey(RejudgeOperation, on_delete=models.CASCADE, db_constraint=False,
                                  related_name="items")
    submission_type = models.CharField(max_length=16)
    submission_id = models.BigIntegerField()
    pool = models.CharField(max_length=16)
    job_id = models.BigIntegerField(null=True, blank=True)
    verdict_before = models.CharField(max_length=16, blank=True, default="")
    # Gone (deleted) by the time its turn came: nothing to judge, counted as done.
    skipped = models.BooleanField(default=False)

    class Meta:
        db_table = "judge_rejudge_item"
        constraints = [models.UniqueConstraint(fields=["operation", "submission_type", "submission_id"],
                                               name="uniq_rejudge_item")]
        indexes = [models.Index(fields=["operation", "job_id", "id"], name="judge_rejudge_item_next")]


from judging.exams import (  # noqa: E402,F401 - models of this app, registered with it
    Exam, ExamAnswer, ExamMode, ExamParticipant, ExamProblem, ExamQuestion, ExamScore, IdempotencyKey, Lesson,
    QuestionKind,
)
