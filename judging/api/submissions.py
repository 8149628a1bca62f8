"""The user API: submit code, read your own submission."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from judging.models import SUBMISSION_MODELS, Verdict
from judging.selectors import submission_state
from judging.services.exams import held_status, hidden_wait
from judging.services.idempotency import checked_key, submit_once
from judging.services.submit import MAX_SOURCE_BYTES, submission_submit
from kece.api import ContractView, validated
from kece.errors import NotFound
from kece.permissions import USER_AUTHENTICATION, can_manage_judgers
from kece.schema import errors

TAGS = ["submissions"]


class SubmitIn(serializers.Serializer):
    problemId = serializers.IntegerField(min_value=1, max_value=2**62)
    # Not trimmed: `language` must name a pool exactly; " python" is "anything else" (API.md).
    language = serializers.CharField(max_length=32, trim_whitespace=False)
    # No string of more characters than that many bytes fits in it (the service counts UTF-8 bytes).
    code = serializers.CharField(max_length=MAX_SOURCE_BYTES, trim_whitespace=False)
    lessonPracticeId = serializers.IntegerField(min_value=1, max_value=2**62, required=False, allow_null=True)
    examId = serializers.IntegerField(min_value=1, max_value=2**62, required=False, allow_null=True)


class SubmitOut(serializers.Serializer):
    submissionType = serializers.ChoiceField(choices=list(SUBMISSION_MODELS))
    submissionId = serializers.IntegerField()
    status = serializers.CharField()


class SubmissionCaseOut(serializers.Serializer):
    ordinal = serializers.IntegerField()
    verdict = serializers.CharField()
    timeMs = serializers.IntegerField()
    memoryKb = serializers.IntegerField()
    score = serializers.IntegerField()


class SubmissionOut(serializers.Serializer):
    submissionType = serializers.CharField()
    submissionId = serializers.IntegerField()
    status = serializers.CharField()
    waitReason = serializers.ChoiceField(choices=["queued", "backoff", "no_node", "hand_in", "unpublished"],
                                         allow_null=True)
    verdict = serializers.CharField(allow_null=True)
    score = serializers.IntegerField(allow_null=True)
    timeMs = serializers.IntegerField(allow_null=True)
    memoryKb = serializers.IntegerField(allow_null=True)
    cases = SubmissionCaseOut(many=True)


class UserView(ContractView):
    authentication_classes = USER_AUTHENTICATION
    permission_classes = [IsAuthenticated]


IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key", str, OpenApiParameter.HEADER, required=False,
    description="Per user, kept at least 24 h: the same key returns the original submission with status "
                "200 instead of 202; the same key with another body is 409 idempotency_conflict; 409 "
                "exam_closed refuses an exam submission after hand-in or outside the exam's time; 409 "
                "exam_in_progress refuses a submission without examId for a problem of an exam the user takes, "
                "until that exam ends.")


class SubmitView(UserView):
    @extend_schema(tags=TAGS, request=SubmitIn, parameters=[IDEMPOTENCY_KEY],
                   responses={202: SubmitOut,
                              200: OpenApiResponse(SubmitOut, description="A retry with the same Idempotency-Key: "
                                                                          "the original submission"),
                              **errors(409, 429)}, summary="Submit code for judging",
                   description="A practice submit into a pool beyond its backpressure thresholds, or any submit "
                               "beyond its user's own limits (active jobs, rate), is refused with 429 `throttled` "
                               "and Retry-After; nothing is written.")
    def post(self, request):
        data = validated(SubmitIn, request.data)
        key = checked_key(request.headers.get("Idempotency-Key"))
        submission, created = submit_once(
            lambda after_insert: submission_submit(
                user=request.user, problem_id=data["problemId"], language=data["language"], code=data["code"],
                lesson_practice_id=data.get("lessonPracticeId"), exam_id=data.get("examId"),
                after_insert=after_insert),
            user=request.user, key=key, data=data, now=timezone.now())
        if created:
            return Response({"submissionType": submission.TYPE, "submissionId": submission.pk, "status": "PENDING"},
                            status=202)
        # A retry: the original submission as it stands now, as its owner may see it.
        shown = visible_json(submission, request.user, now=timezone.now())
        return Response({k: shown[k] for k in ("submissionType", "submissionId", "status")})


def submission_json(submission, *, now, shown=None) -> dict:
    """`shown`: its state as read for a list (`selectors.shown_states`), else read here."""
    _job, status, wait_reason = (shown.job, shown.status, shown.wait_reason) if shown else submission_state(
        submission, now=now)
    judged = status in Verdict.values
    return {
        "submissionType": submission.TYPE,
        "submissionId": submission.pk,
        "status": status,
        "waitReason": _waiting_for(status, wait_reason),
        "verdict": submission.verdict if judged else None,
        "score": submission.score if judged else None,
        "timeMs": submission.time_ms if judged else None,
        "memoryKb": submission.memory_kb if judged else None,
        "cases": [{k: c[k] for k in ("ordinal", "verdict", "score")} | {"timeMs": c.get("time_ms", 0),
                  "memoryKb": c.get("memory_kb", 0)} for c in submission.cases] if judged else [],
    }


def _waiting_for(status: str, reason: str | None) -> str | None:
    """`waitReason`: why a submission waits, only while it does (PENDING)."""
    return reason if status == "PENDING" else None


def unpublished_json(submission, waiting: str) -> dict:
    """An OI exam's submission before its results are published: waiting, whatever its job did
    (or CANCELLED, one its hand-in did not judge)."""
    status = held_status(waiting)
    return {"submissionType": submission.TYPE, "submissionId": submission.pk, "status": status,
            "waitReason": _waiting_for(status, waiting), "verdict": None, "score": None, "timeMs": None,
            "memoryKb": None, "cases": []}


def visible_json(submission, user, *, now) -> dict:
    """The submission as `user` may see it: an unpublished OI exam's stays waiting."""
    if (waiting := hidden_wait(submission, user)) is not None:
        return unpublished_json(submission, waiting)
    return submission_json(submission, now=now)


class SubmissionView(UserView):
    @extend_schema(tags=TAGS, responses={200: SubmissionOut}, summary="One of your submissions and its status")
    def get(self, request, submission_type: str, submission_id: int):
        model = SUBMISSION_MODELS.get(submission_type)
        submission = model.objects.filter(pk=submission_id).first() if model else None
        if submission is None or (submission.user_id != request.user.pk and not can_manage_judgers(request.user)):
            raise NotFound()  # someone else's submission does not exist for you
        return Response(visible_json(submission, request.user, now=timezone.now()))
