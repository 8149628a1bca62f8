from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("judging", "0004_quarantine")]

    operations = [
        migrations.AddField(model_name="problem", name="is_canary", field=models.BooleanField(default=False)),
    ]
