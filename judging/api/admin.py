"""Admin operations on submissions (rejudge and delete) and problems (delete)."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from judging.models import SUBMISSION_MODELS
from judging.services.rejudge import submission_delete, submission_rejudge
from kece.api import AdminView
from kece.errors import NotFound

TAGS = ["admin"]


class RejudgeOut(serializers.Serializer):
    generation = serializers.IntegerField()


def _checked_type(submission_type: str) -> str:
    if submission_type not in SUBMISSION_MODELS:
        raise NotFound()
    return submission_type


class RejudgeView(AdminView):
    @extend_schema(tags=TAGS, request=None, responses={202: RejudgeOut},
                   summary="Judge a submission again as a new generation")
    def post(self, request, submission_type: str, submission_id: int):
        job = submission_rejudge(submission_type=_checked_type(submission_type), submission_id=submission_id,
                                 now=timezone.now())
        return Response({"generation": job.generation}, status=202)


class SubmissionAdminView(AdminView):
    @extend_schema(tags=TAGS, request=None, responses={204: OpenApiResponse(description="Deleted.")},
                   summary="Delete a submission: its job is cancelled and late results refused")
    def delete(self, request, submission_type: str, submission_id: int):
        submission_delete(submission_type=_checked_type(submission_type), submission_id=submission_id,
                          now=timezone.now())
        return Response(status=204)


class ProblemAdminView(AdminView):
    @extend_schema(tags=TAGS, request=None, responses={204: OpenApiResponse(description="Deleted.")},
                   summary="Delete a problem: its submissions' open jobs are cancelled and late results refused")
    def delete(self, request, problem_id: int):
        from judging.services.lessons import problem_delete

        problem_delete(problem_id=problem_id, now=timezone.now())
        return Response(status=204)
