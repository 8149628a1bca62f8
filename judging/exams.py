"""Exams, lessons and idempotency keys: the entry points a submission may come through
besides free practice. Imported by `judging.models`, so they belong to the judging app."""

from django.conf import settings
from django.db import models


class ExamMode(models.TextChoices):
    # ACM: every submission is judged at once; the best counts, with its attempts.
    ACM = "ACM"
    # OI: submissions are saved; the hand-in (or the end) judges the last one of each problem.
    OI = "OI"


class Exam(models.Model):
    title = models.CharField(max_length=200)
    mode = models.CharField(max_length=8, choices=ExamMode.choices)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    revision = models.PositiveIntegerField(default=1)
    # OI scores are shown to participants from this moment on; ACM scores are always live.
    published_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "exam"
        indexes = [models.Index(fields=["ends_at"], name="exam_ends_at")]
        permissions = [("manage_exams", "Can manage exams, lessons and practices")]

    def __str__(self):
        return self.title

    @property
    def judges_at_once(self) -> bool:
        return self.mode == ExamMode.ACM


class ExamProblem(models.Model):
    exam = models.ForeignKey(Exam, on_delete=models.CASCADE, db_constraint=False, related_name="problems")
    problem = models.ForeignKey("judging.Problem", on_delete=models.PROTECT, db_constraint=False, related_name="+")
    points = models.PositiveIntegerField(default=100)
    ordinal = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "exam_problem"
        constraints = [models.UniqueConstraint(fields=["exam", "problem"], name="uniq_exam_problem")]
        ordering = ["ordinal", "id"]


class QuestionKind(models.TextChoices):
    SINGLE = "SINGLE"
    MULTIPLE = "MULTIPLE"


class ExamQuestion(models.Model):
    """An objective question, scored in the application at hand-in: all points for exactly
    the correct set of options, none otherwise."""

    exam = models.ForeignKey(Exam, on_delete=models.CASCADE, db_constraint=False, related_name="questions")
    kind = models.CharField(max_length=8, choices=QuestionKind.choices)
    prompt = models.TextField()
    options = models.JSONField(default=list)  # [text, …]; a choice is an index into it
    correct = models.JSONField(default=list)  # [index, …]
    points = models.PositiveIntegerField(default=10)
    ordinal = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "exam_question"
        ordering = ["ordinal", "id"]

    def score_for(self, choices) -> int:
        return self.points if sorted(set(choices)) == sorted(set(self.correct)) else 0


class ExamParticipant(models.Model):
    """One user in one exam. Its row lock serialises that user's submits, answers and
    hand-in (`judging.locking.lock_exam_participant`): the hand-in result is written once,
    under it, and every later hand-in reads it back."""

    exam = models.ForeignKey(Exam, on_delete=models.CASCADE, db_constraint=False, related_name="participants")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, db_constraint=False,
                             related_name="+")
    handed_in_at = models.DateTimeField(null=True, blank=True)
    hand_in_jobs = models.PositiveIntegerField(null=True, blank=True)
    objective_score = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "exam_participant"
        constraints = [models.UniqueConstraint(fields=["exam", "user"], name="uniq_exam_participant")]
        indexes = [models.Index(fields=["handed_in_at", "exam"], name="exam_participant_pending")]


class ExamAnswer(models.Model):
    participant = models.ForeignKey(ExamParticipant, on_delete=models.CASCADE, db_constraint=False,
                                    related_name="answers")
    question = models.ForeignKey(ExamQuestion, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    choices = models.JSONField(default=list)
    score = models.PositiveIntegerField(null=True, blank=True)  # set at hand-in
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "exam_answer"
        constraints = [models.UniqueConstraint(fields=["participant", "question"], name="uniq_exam_answer")]


class ExamScore(models.Model):
    """A participant's score on one problem of an exam, recomputed by the outbox from the
    committed submissions (`judging.services.events.apply_exam_score`)."""

    exam = models.ForeignKey(Exam, on_delete=models.CASCADE, db_constraint=False, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, db_constraint=False,
                             related_name="+")
    problem = models.ForeignKey("judging.Problem", on_delete=models.CASCADE, db_constraint=False, related_name="+")
    score = models.PositiveSmallIntegerField(default=0)  # the counted submission's 0…100
    points = models.PositiveIntegerField(default=0)  # weighted by the exam problem's points
    attempts = models.PositiveIntegerField(default=0)
    submission_type = models.CharField(max_length=16, blank=True, default="")
    submission_id = models.BigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "exam_score"
        constraints = [models.UniqueConstraint(fields=["exam", "user", "problem"], name="uniq_exam_score")]


class Lesson(models.Model):
    title = models.CharField(max_length=200)
    revision = models.PositiveIntegerField(default=1)
    deleted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "lesson"

    def __str__(self):
        return self.title


class IdempotencyKey(models.Model):
    """A submit's `Idempotency-Key`: the same key from the same user names the same
    submission for at least `KECE_IDEMPOTENCY_TTL_S`."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, db_constraint=False,
                             db_index=False, related_name="+")
    # sha-256 of the key: compared exactly (a text column's collation would make "K" and
    # "k", or "k" and "k ", one key).
    key_digest = models.CharField(max_length=64)
    body_digest = models.CharField(max_length=64)
    submission_type = models.CharField(max_length=16)
    submission_id = models.BigIntegerField()
    created_at = models.DateTimeField()

    class Meta:
        db_table = "submission_idempotency_key"
        constraints = [models.UniqueConstraint(fields=["user", "key_digest"], name="uniq_idempotency_user_key")]
        indexes = [models.Index(fields=["created_at"], name="idempotency_created")]
