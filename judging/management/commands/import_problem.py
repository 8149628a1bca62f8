from django.core.management.base import BaseCommand, CommandError

from judging.services.problems import PackageError, problem_import


class Command(BaseCommand):
    help = "Import a problem package folder (problem.json + files); re-import publishes a new manifest version."

    def add_arguments(self, parser):
        parser.add_argument("directory")

    def handle(self, *args, directory, **options):
        try:
            problem, manifest = problem_import(directory)
        except PackageError as exc:
            raise CommandError(f"{directory}: {exc}") from exc
        self.stdout.write(f"problem {problem.pk} {problem.slug} manifest {manifest.pk}")
