import json
import shutil
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from judging import artifacts
from judging.models import JudgeJob, Manifest, Problem
from tests.judging.helpers import submit

pytestmark = pytest.mark.django_db

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def run_import(directory) -> str:
    out = StringIO()
    call_command("import_problem", str(directory), stdout=out)
    return out.getvalue().strip()


@pytest.mark.parametrize("slug", ["aplusb", "prefix-sums", "sql-top-students", "sql-raise-salaries"])
def test_every_sample_package_imports(slug):
    line = run_import(SAMPLES / slug)
    problem = Problem.objects.get(slug=slug)
    manifest = problem.current_manifest
    assert line == f"problem {problem.pk} {slug} manifest {manifest.pk}"
    for digest in manifest.digests():
        assert artifacts.path_for(digest).is_file()
    if problem.kind == "SQL":
        assert manifest.languages == ["mysql"] and manifest.sql["schema"]["digest"]
    else:
        assert sum(c["weight"] for c in manifest.cases) == 100


def test_reimport_publishes_a_new_version_and_old_jobs_keep_theirs(tmp_path, student):
    package = tmp_path / "aplusb"
    shutil.copytree(SAMPLES / "aplusb", package)
    run_import(package)
    problem = Problem.objects.get(slug="aplusb")
    old_manifest = problem.current_manifest
    submission = submit(student, problem)

    # The same package again (a script importing the whole set): no new version.
    assert run_import(package) == f"problem {problem.pk} aplusb manifest {old_manifest.pk}"
    (package / "cases" / "1.out").write_text("not the old answer\n")
    run_import(package)
    problem.refresh_from_db()
    assert problem.current_manifest.version == 2 and problem.current_manifest_id != old_manifest.pk
    job = JudgeJob.objects.get(submission_id=submission.pk)
    assert job.manifest_id == old_manifest.pk
    assert job.snapshot["cases"] == old_manifest.cases
    assert Manifest.objects.filter(problem=problem).count() == 2


def test_identical_files_are_stored_once(tmp_path, settings):
    settings.KECE_ARTIFACT_ROOT = str(tmp_path / "store")  # a store of this test's own to count
    stored = []
    for name in ("one", "two"):
        shutil.copytree(SAMPLES / "aplusb", tmp_path / name)
        spec = json.loads((tmp_path / name / "problem.json").read_text())
        spec["slug"] = f"aplusb-{name}"
        (tmp_path / name / "problem.json").write_text(json.dumps(spec))
        run_import(tmp_path / name)
        stored.append(sorted(p.name for p in (tmp_path / "store").rglob("*") if p.is_file()))
    first, second = (Problem.objects.get(slug=f"aplusb-{n}").current_manifest for n in ("one", "two"))
    assert first.cases == second.cases
    package_files = {(SAMPLES / "aplusb" / c[side]).read_bytes() for c in spec["cases"] for side in ("input", "output")}
    assert stored[0] == sorted(artifacts.sha256_hex(data) for data in package_files)
    assert stored[1] == stored[0], "the second import stored nothing new"


@pytest.mark.parametrize("breakage, message", [
    (lambda spec: spec["cases"][0].update(input="cases/missing.in"), "does not exist"),
    (lambda spec: spec["cases"][0].update(weight=21), "add up to 100"),
    (lambda spec: spec["cases"][0].update(input="../../etc/passwd"), "outside the package"),
    (lambda spec: spec.update(languages=["cobol"]), "languages"),
    (lambda spec: spec.update(kind="ESSAY"), "kind"),
    (lambda spec: spec.pop("timeLimitMs"), "timeLimitMs"),
])
def test_a_broken_package_is_refused_with_a_clear_message(tmp_path, breakage, message):
    package = tmp_path / "broken"
    shutil.copytree(SAMPLES / "aplusb", package)
    spec = json.loads((package / "problem.json").read_text())
    breakage(spec)
    (package / "problem.json").write_text(json.dumps(spec))
    with pytest.raises(CommandError, match=message):
        run_import(package)
    assert not Problem.objects.exists()
