from django.urls import path

from nodes.console import failed, views

urlpatterns = [
    path("admin/judgers", views.fleet, name="console-fleet"),
    path("admin/judgers/register", views.register, name="console-register"),
    path("admin/judgers/host-groups", views.host_groups, name="console-host-groups"),
    path("admin/judgers/host-groups/<id:group_id>", views.host_group_edit, name="console-host-group"),
    path("admin/judgers/rejudges", views.rejudges, name="console-rejudges"),
    path("admin/judgers/failed", failed.failed_work, name="console-failed"),
    path("admin/judgers/rejudges/<id:rejudge_id>/cancel", views.rejudge_cancel_view, name="console-rejudge-cancel"),
    path("admin/judgers/<id:node_id>/rejudge", views.node_rejudge, name="console-node-rejudge"),
    path("admin/judgers/<id:node_id>", views.node_detail, name="console-node"),
    path("admin/judgers/<id:node_id>/join", views.join, name="console-join"),
    path("admin/judgers/<id:node_id>/<str:action>", views.act, name="console-act"),
]
