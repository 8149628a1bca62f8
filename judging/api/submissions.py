"""The user API: submit code, read your own submission."""

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from judging.models import SUBMISSION_MODELS, Verdict
from judging.selectors import submission_state
from judging.services.submit import submission_submit
from kece.api import ContractView, validated
from kece.errors import NotFound
from kece.schema import errors
from kece.permissions import USER_AUTHENTICATION, can_manage_judgers

TAGS = ["submissions"]


class SubmitIn(serializers.Serializer):
    problemId = serializers.IntegerField(min_value=1, max_value=2**62)
    # Not trimmed: `language` must name a pool exactly; " python" is "anything else" (API.md).
    language = serializers.CharField(max_length=32, trim_whitespace=False)
    code = serializers.CharField(max_length=512 * 1024, trim_whitespace=False)
    lessonPracticeId = serializers.IntegerField(min_value=1, max_value=2**62, required=False, allow_null=True)


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
    waitReason = serializers.ChoiceField(choices=["queued", "backoff", "no_node"], allow_null=True)
    verdict = serializers.CharField(allow_null=True)
    score = serializers.IntegerField(allow_null=True)
    timeMs = serializers.IntegerField(allow_null=True)
    memoryKb = serializers.IntegerField(allow_null=True)
    cases = SubmissionCaseOut(many=True)


class UserView(ContractView):
    authentication_classes = USER_AUTHENTICATION
    permission_classes = [IsAuthenticated]


class SubmitView(UserView):
    @extend_schema(tags=TAGS, request=SubmitIn, responses={202: SubmitOut, **errors(429)},
                   summary="Submit code for judging",
                   description="A practice submit into a pool beyond its backpressure thresholds is refused with "
                               "429 `throttled` and Retry-After; nothing is written.")
    def post(self, request):
        data = validated(SubmitIn, request.data)
        submission = submission_submit(user=request.user, problem_id=data["problemId"], language=data["language"],
                                       code=data["code"], lesson_practice_id=data.get("lessonPracticeId"))
        return Response({"submissionType": submission.TYPE, "submissionId": submission.pk, "status": "PENDING"},
                        status=202)


def submission_json(submission, *, now) -> dict:
    _job, status, wait_reason = submission_state(submission, now=now)
    judged = status in Verdict.values
    return {
        "submissionType": submission.TYPE,
        "submissionId": submission.pk,
        "status": status,
        "waitReason": wait_reason,
        "verdict": submission.verdict if judged else None,
        "score": submission.score if judged else None,
        "timeMs": submission.time_ms if judged else None,
        "memoryKb": submission.memory_kb if judged else None,
        "cases": [{k: c[k] for k in ("ordinal", "verdict", "score")} | {"timeMs": c.get("time_ms", 0),
                  "memoryKb": c.get("memory_kb", 0)} for c in submission.cases] if judged else [],
    }


class SubmissionView(UserView):
    @extend_schema(tags=TAGS, responses={200: SubmissionOut}, summary="One of your submissions and its status")
    def get(self, request, submission_type: str, submission_id: int):
        model = SUBMISSION_MODELS.get(submission_type)
        submission = model.objects.filter(pk=submission_id).first() if model else None
        if submission is None or (submission.user_id != request.user.pk and not can_manage_judgers(request.user)):
            raise NotFound()  # someone else's submission does not exist for you
        return Response(submission_json(submission, now=timezone.now()))
