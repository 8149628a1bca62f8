from django.urls import path

from judging.api import node
from judging.api.claim import ClaimView
from judging.api.result import ResultView

urlpatterns = [
    path("join", node.JoinView.as_view()),
    path("session", node.SessionView.as_view()),
    path("heartbeat", node.HeartbeatView.as_view()),
    path("jobs/claim", ClaimView.as_view(), name="node-claim"),
    path("jobs/renew", node.RenewView.as_view()),
    path("jobs/<id:job_id>/artifacts/<str:digest>", node.ArtifactView.as_view()),
    path("jobs/<id:job_id>/result", ResultView.as_view()),
]
