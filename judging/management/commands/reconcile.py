from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from judging.services.reconcile import REPAIRABLE, reconcile_run
import kece.metrics as metrics


class Command(BaseCommand):
    help = ("Check the design's gates against the tables (every submission has its current job, no job runs "
            "without a live lease, every settled job has its events and every delivered event its derived rows, "
            "one result per generation) and print what was found; --repair mends what is safe to mend.")

    def add_arguments(self, parser):
        parser.add_argument("--repair", action="store_true", help="repair what is safe to repair, through the services")

    def handle(self, *args, repair, **options):
        report = reconcile_run(now=timezone.now(), repair=repair)
        if repair:  # what the daily step does: its success is this run's (KeceHousekeepingStale ends)
            metrics.step_succeeded("reconcile")
        for name, found in report.findings.items():
            fixed = report.repaired.get(name)
            note = f", repaired {fixed}" if fixed is not None else (
                "" if not found["count"] or name in REPAIRABLE else ", needs a person")
            sample = f" (e.g. {', '.join(map(str, found['sample'][:5]))})" if found["count"] else ""
            self.stdout.write(f"{name}: {found['count']}{sample}{note}")
        self.stdout.write(f"reconciliation {report.pk}: {report.total} finding(s)"
                          + (" (repair asked)" if repair else " (check only; --repair mends what is safe)"))
        # Exit status 1 while anything is left out of place, so that a cron job or a script notices.
        left = sum(max(0, found["count"] - (report.repaired.get(name) or 0)) for name, found in report.findings.items())
        if left:
            raise CommandError(f"{left} finding(s) left", returncode=1)
