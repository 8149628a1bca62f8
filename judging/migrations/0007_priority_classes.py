from datetime import timedelta

from django.conf import settings
from django.db import migrations, models

ACTIVE = ("QUEUED", "RUNNING")


def backfill(apps, schema_editor):
    """Jobs from before the classes are practice work; their keys take practice's lead, and
    active ones learn their submitter for the fair share."""
    JudgeJob = apps.get_model("judging", "JudgeJob")
    lead = timedelta(seconds=settings.KECE_MAX_CLASS_WAIT_S) / 2
    models_by_type = {"ALGO": apps.get_model("judging", "Submission"), "SQL": apps.get_model("judging", "DbSubmission")}
    for job in JudgeJob.objects.only("pk", "available_at", "state", "submission_type", "submission_id").iterator():
        values = {"claim_key": job.available_at - lead}
        model = models_by_type.get(job.submission_type)
        if job.state in ACTIVE and model is not None:
            values["user_id"] = model.objects.filter(pk=job.submission_id).values_list("user_id", flat=True).first()
        JudgeJob.objects.filter(pk=job.pk).update(**values)


class Migration(migrations.Migration):
    dependencies = [("judging", "0006_exams_lessons_idempotency")]

    operations = [
        migrations.AddField(model_name="judgejob", name="priority_class", field=models.CharField(
            choices=[("EXAM", "Exam"), ("PRACTICE", "Practice"), ("REJUDGE", "Rejudge")], default="PRACTICE",
            max_length=16)),
        migrations.AddField(model_name="judgejob", name="claim_key", field=models.DateTimeField(null=True)),
        migrations.AddField(model_name="judgejob", name="user_id", field=models.BigIntegerField(blank=True, null=True)),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.AlterField(model_name="judgejob", name="claim_key", field=models.DateTimeField()),
        migrations.RemoveIndex(model_name="judgejob", name="judge_job_claim"),
        migrations.AddIndex(model_name="judgejob", index=models.Index(
            fields=["pool", "state", "claim_key", "id"], name="judge_job_claim")),
        migrations.AddIndex(model_name="judgejob", index=models.Index(
            fields=["user_id", "pool", "state"], name="judge_job_user_active")),
    ]
