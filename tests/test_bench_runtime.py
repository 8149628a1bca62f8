"""The acceptance benchmark's real-runtime table and slot advice (`bench/acceptance.py --runtime`):
a pool it could not measure says so, a verdict that differs from the sample's is named, and the
slots come from the console's capacity arithmetic."""

from bench.acceptance import Baseline, print_baselines, print_runtime_advice


def test_a_pool_whose_runtime_is_missing_is_reported_unmeasured_not_given_figures(capsys):
    print_baselines([Baseline("java", missing="javac, java not installed"),
                     Baseline("python", judge=[0.2, 0.4], cpu=1.0, max_rss=50 * 2**20, tree_rss=60 * 2**20)], 1)
    lines = capsys.readouterr().out.splitlines()
    java = next(line for line in lines if line.strip().startswith("java"))
    assert java.split() == ["java", "not", "measured:", "javac,", "java", "not", "installed"]
    python = next(line for line in lines if line.strip().startswith("python"))
    assert python.split()[:6] == ["python", "2", "0", "s", "300", "ms"] and python.endswith("as written")


def test_a_verdict_other_than_the_sample_was_written_for_is_named(capsys):
    print_baselines([Baseline("cpp", judge=[1.0], failed=1, wrong=[("aplusb/mle.cpp", "MLE", "TLE")])], 1)
    cpp = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("cpp"))
    assert cpp.split()[1] == "2"  # the failed job counts among the jobs
    assert cpp.endswith("1 differ: aplusb/mle.cpp MLE->TLE")


def test_the_slots_for_an_arrival_rate_follow_littles_law_with_the_consoles_headroom(capsys, settings):
    settings.KECE_CAPACITY_UTILISATION = 0.8
    print_runtime_advice([Baseline("python", judge=[0.5, 1.5]), Baseline("java", missing="java")], {}, [1.0, 4.0], 0)
    out = capsys.readouterr().out
    # 1 job/s of 1 s keeps one slot busy: 1.25 slots at most 80 % busy, so 2; 4 jobs/s: 5.
    assert "python  1 jobs/s: 2, 4 jobs/s: 5" in out
    assert "java " not in out
