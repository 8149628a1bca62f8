import time

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from judging.models import JobState, JudgeJob
from kece.converters import whole_number
from kece.errors import DomainError
from nodes.models import JudgeNode
from nodes.services import node_drain


class Command(BaseCommand):
    help = ("Drain a judge node: it claims nothing new, its running jobs still renew and settle. "
            "With --wait, report progress until it holds no lease (then it may be stopped).")

    def add_arguments(self, parser):
        parser.add_argument("node", help="node id or name")
        parser.add_argument("--wait", action="store_true", help="wait until the node holds no lease")
        parser.add_argument("--timeout", type=float, default=0, help="with --wait: give up after this many seconds")

    def handle(self, *args, node, wait, timeout, **options):
        found = JudgeNode.objects.filter(pk=number).first() if (number := whole_number(node)) else None
        found = found or JudgeNode.objects.filter(name=node).first()
        if found is None:
            raise CommandError(f"no node {node!r}")
        try:
            drained = node_drain(node_id=found.pk, actor="manage.py drain_node", now=timezone.now())
        except DomainError as exc:
            raise CommandError(exc.detail) from exc
        running = self._running(drained)
        self.stdout.write(f"node {drained.pk} {drained.name} is DRAINING; {running} running job(s)")
        if not wait:
            return
        started = time.monotonic()
        last = running
        while running:
            if timeout and time.monotonic() - started > timeout:
                raise CommandError(f"node {drained.name} still holds {running} lease(s) after {timeout:.0f} s")
            time.sleep(1)
            running = self._running(drained)
            if running != last:
                self.stdout.write(f"  {running} running job(s) left")
                last = running
        self.stdout.write(f"node {drained.pk} {drained.name} holds no lease; it may be stopped")

    @staticmethod
    def _running(node) -> int:
        return JudgeJob.objects.filter(node_id=node.pk, state=JobState.RUNNING).count()
