"""The schema's migrations: they match the models, and a new one leaves the release before it
working while it runs (an upgrade keeps the old pods serving until the new ones are ready)."""

import pytest
from django.core.management import call_command
from django.db import models
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations import AddField, AlterField

OURS = ("judging", "nodes", "pools", "kece")

# Made before the rule: each adds a NOT NULL column whose default is Django's only, so the
# release before it cannot insert rows while it runs or after. An upgrade across one of them
# stops the old release first (deploy/README, "Upgrading").
BEFORE_THE_RULE = {
    ("judging", "0003_problem_statement"), ("judging", "0005_problem_is_canary"),
    ("judging", "0006_exams_lessons_idempotency"), ("judging", "0007_priority_classes"),
    ("judging", "0009_problem_visibility"), ("judging", "0011_job_provenance_arrivals"),
    ("nodes", "0002_self_check_agent_version"), ("nodes", "0003_quarantine"),
}


@pytest.mark.django_db
def test_the_migrations_match_the_models():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_a_new_column_the_release_before_does_not_know_has_a_database_default():
    """Django gives a NOT NULL column its default only while adding it, then drops it: the
    previous release's inserts, which do not name the column, would all fail (1364)
    until it is gone. A new column is NULL-able or has `db_default`, and so is one made NOT
    NULL later."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    offending = []
    for (app, name), migration in loader.disk_migrations.items():
        if app not in OURS or (app, name) in BEFORE_THE_RULE or migration.initial:
            continue  # (an initial migration's tables are new: no release before wrote them)
        state = loader.project_state((app, name), at_end=False)
        for operation in migration.operations:
            field = getattr(operation, "field", None)
            if isinstance(operation, (AddField, AlterField)) and not field.null and not field.many_to_many \
                    and field.db_default is models.NOT_PROVIDED:
                before = state.models[app, operation.model_name_lower].fields.get(operation.name)
                # (made NOT NULL from NOT NULL: the release before names it in its inserts)
                if isinstance(operation, AddField) or before.null:
                    offending.append(f"{app}.{name}: {operation.model_name}.{operation.name}")
            operation.state_forwards(app, state)
    assert offending == []


@pytest.mark.parametrize("app, name", sorted(BEFORE_THE_RULE))
def test_the_list_of_migrations_before_the_rule_names_real_ones(app, name):
    assert (app, name) in MigrationLoader(None, ignore_no_migrations=True).disk_migrations
