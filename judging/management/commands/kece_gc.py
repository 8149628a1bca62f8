import time

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from judging.services.retention import Policy, gc_run
from kece.errors import Unavailable
import kece.metrics as metrics


PROGRESS_S = 2.0


def _amount(size: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return ""


class Command(BaseCommand):
    help = ("Prune now what has outlived its retention age (the periodic step `gc` does the same, a bounded run "
            "at a time): finished jobs' details, delivered outbox events, audit rows, and stored files nothing "
            "names after their grace. --dry-run prints what would go and changes nothing.")

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="print what would go (counts, bytes, sample ids)")
        parser.add_argument("--batches", type=int, default=None,
                            help="at most this many batches of each kind (default: until nothing is left)")

    def handle(self, *args, dry_run, batches, **options):
        if batches is not None and batches < 1:
            raise CommandError("--batches must be at least 1")
        shown = [time.monotonic()]

        def progress(report):
            # A large backlog takes minutes: say how far each kind has got, every few seconds.
            if time.monotonic() - shown[0] >= PROGRESS_S:
                shown[0] = time.monotonic()
                self.stderr.write(f"{report.kind}: {report.count} {'would go' if dry_run else 'gone'} so far …")

        try:
            reports = gc_run(now=timezone.now(), policy=Policy.from_settings(batches=batches, on_batch=progress),
                             dry_run=dry_run)
        except Unavailable as exc:
            raise CommandError(exc.detail) from exc
        verb = "would go" if dry_run else "gone"
        for report in reports:
            if report.forever:
                self.stdout.write(f"{report.kind}: kept forever (no retention age set)")
                continue
            sample = f" (e.g. {', '.join(map(str, report.sample))})" if report.sample else ""
            more = ", more next run" if report.more else ""
            self.stdout.write(f"{report.kind}: {report.count} {verb}, {_amount(report.bytes)}{sample}{more}")
        if not dry_run:  # what the hourly step does: its success is this run's (KeceHousekeepingStale ends)
            metrics.step_succeeded("gc")
        total = sum(r.count for r in reports)
        self.stdout.write(f"{'dry run: nothing changed' if dry_run else 'retention'}: {total} in all")
