"""The lab's history checker on synthetic histories: it must catch a lost, a duplicated and an
unexpected settlement, and pass a clean history, including one with a lost answer retried."""

from bench.lab.history import check


def submit(key, status=202, submission=None):
    return {"kind": "submit", "key": key, "status": status, "submission": submission}


def claim(node, job, epoch):
    return {"kind": "claim", "node": node, "job": job, "epoch": epoch}


def result(node, job, epoch, status=None, error=None):
    return {"kind": "result", "node": node, "job": job, "epoch": epoch, "status": status, "error": error}


def settlement(job, submission, epoch, node, events=1, state="COMPLETED"):
    return {"kind": "settlement", "job": job, "submission": submission, "state": state, "epoch": epoch,
            "node": node, "events": events}


def clean_history():
    """Two submissions; the first's lease taken over after its node went silent (its late
    result refused), the second's result answer lost and the retry answered `duplicate`."""
    return [
        submit("k1", submission=1), submit("k2", status=None), submit("k2", status=200, submission=2),
        claim(7, 11, 1), claim(8, 11, 2), result(8, 11, 2, status="settled"), result(7, 11, 1, error="lease_lost"),
        claim(8, 12, 1), result(8, 12, 1, status="duplicate"),
        settlement(11, 1, 2, 8), settlement(12, 2, 1, 8),
    ]


def test_a_clean_history_passes():
    figures = check(clean_history())
    assert figures.ok, figures.problems
    assert (figures.attempted, figures.accepted, figures.settled_once) == (2, 2, 2)
    assert "attempted 2, accepted 2, settled once 2, lost 0, duplicated 0, unexpected 0" == figures.line()


def test_an_accepted_submission_that_never_settles_is_lost():
    history = clean_history()
    history.append(submit("k3", submission=3))
    history.append(settlement(13, 3, None, None, events=0, state="RUNNING"))
    figures = check(history)
    assert (figures.lost, figures.duplicated, figures.unexpected) == (1, 0, 0)
    assert not figures.ok
    assert "submission 3" in figures.problems[0] and "RUNNING" in figures.problems[0]


def test_an_accepted_submission_with_no_job_at_all_is_lost():
    figures = check([*clean_history(), submit("k3", submission=3)])
    assert figures.lost == 1 and not figures.ok


def test_two_leases_answered_settled_are_a_duplicate():
    history = clean_history()
    # The silent node's late result accepted as well: two settlements of one job.
    history[history.index(result(7, 11, 1, error="lease_lost"))] = result(7, 11, 1, status="settled")
    figures = check(history)
    assert figures.duplicated == 1 and not figures.ok
    assert any("submission 1 settled 2 times" in p for p in figures.problems)


def test_two_outbox_events_are_a_duplicate():
    history = clean_history()
    history[-1] = settlement(12, 2, 1, 8, events=2)
    assert check(history).duplicated == 1


def test_one_key_accepted_as_two_submissions_is_a_duplicate():
    history = [*clean_history(), submit("k2", status=202, submission=5), settlement(15, 5, 1, 8)]
    figures = check(history)
    assert figures.duplicated == 1 and not figures.ok


def test_a_settlement_nobody_submitted_is_unexpected():
    history = [*clean_history(), claim(8, 14, 1), result(8, 14, 1, status="settled"), settlement(14, 4, 1, 8)]
    figures = check(history)
    assert (figures.lost, figures.duplicated, figures.unexpected) == (0, 0, 1)
    assert not figures.ok


def test_a_settlement_of_an_attempt_left_without_an_answer_is_not_unexpected():
    history = [*clean_history(), submit("k4", status=None), claim(8, 14, 1), result(8, 14, 1, status="settled"),
               settlement(14, 4, 1, 8)]
    assert check(history).ok


def test_a_refused_result_that_took_effect_is_unexpected():
    history = clean_history()
    history[history.index(result(8, 12, 1, status="duplicate"))] = result(8, 12, 1, error="lease_lost")
    figures = check(history)
    assert figures.unexpected == 1 and not figures.ok
    assert "refused (lease_lost) yet took effect" in figures.problems[0]


def test_a_result_confirmed_for_a_lease_that_did_not_take_effect_is_unexpected():
    history = clean_history()
    history[history.index(result(7, 11, 1, error="lease_lost"))] = result(7, 11, 1, status="duplicate")
    figures = check(history)
    assert figures.unexpected == 1 and not figures.ok


def test_a_settled_result_from_a_lease_no_agent_was_given_is_unexpected():
    history = [op for op in clean_history() if op != claim(8, 11, 2)]
    assert check(history).unexpected == 1


def test_a_result_settled_under_a_lease_that_had_been_granted_again_is_unexpected():
    """The silent node's late result taken while the job's next lease was live: one
    settlement, but from the lease that had ended."""
    history = [submit("k1", submission=1), claim(7, 11, 1), claim(8, 11, 2), result(7, 11, 1, status="settled"),
               settlement(11, 1, 1, 7)]
    figures = check(history)
    assert (figures.lost, figures.duplicated, figures.unexpected) == (0, 0, 1)
    assert "after lease 2 was granted" in figures.problems[0]
