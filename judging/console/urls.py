from django.urls import path

from judging.console import lessons, views

urlpatterns = [
    path("admin/exams", views.exam_list, name="exam-admin"),
    path("admin/exams/new", views.exam_edit, name="exam-admin-new"),
    path("admin/exams/<id:exam_id>", views.exam_detail, name="exam-admin-detail"),
    path("admin/exams/<id:exam_id>/edit", views.exam_edit, name="exam-admin-edit"),
    path("admin/exams/<id:exam_id>/participants", views.participants_add, name="exam-admin-participants"),
    path("admin/exams/<id:exam_id>/results", views.exam_results, name="exam-admin-results"),
    path("admin/exams/<id:exam_id>/results.csv", views.exam_results_download, name="exam-admin-results-csv"),
    path("admin/exams/<id:exam_id>/publish", views.exam_publish, name="exam-admin-publish"),
    path("admin/exams/<id:exam_id>/delete", views.exam_delete, name="exam-admin-delete"),
    path("admin/lessons", lessons.lesson_list, name="lesson-admin"),
    path("admin/lessons/<id:lesson_id>", lessons.lesson_detail, name="lesson-admin-detail"),
    path("admin/lessons/<id:lesson_id>/practices/new", lessons.practice_edit, name="practice-admin-new"),
    path("admin/practices/<id:practice_id>", lessons.practice_edit, name="practice-admin"),
    path("admin/practices/<id:practice_id>/delete", lessons.practice_delete, name="practice-admin-delete"),
]
