"""A node that hangs up is given nothing, however late the server hears of it."""

import asyncio

from judging.api import bare


def test_a_wait_that_goes_on_after_its_node_hung_up_gives_back_what_it_leased(monkeypatch):
    released = []

    async def run_db(function, *args):
        released.append((function, args))

    monkeypatch.setattr(bare, "run_db", run_db)
    hung_up = asyncio.Event()

    async def receive():
        if not hung_up.is_set():
            hung_up.set()
            return {"type": "http.request", "body": b"{}", "more_body": False}
        return {"type": "http.disconnect"}

    sent = []

    async def send(message):
        sent.append(message)

    async def claim(_headers, _body):
        # As `asyncio.wait_for` on Python 3.11 when its inner wait had just finished: the
        # cancel is swallowed and the claim goes on.
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            pass
        return bare.ok({"jobs": [{"jobId": 7, "leaseEpoch": 2}], "desiredState": "ENABLED"})

    scope = {"type": "http", "method": "POST", "headers": [(b"authorization", b"Bearer x")]}
    asyncio.run(bare.serve(scope, receive, send, claim, stop_on_hangup=True))
    assert released == [(bare._release_unsent_by_header, ({"authorization": "Bearer x"},
                                                           [{"jobId": 7, "leaseEpoch": 2}]))]
    assert sent == [], "nothing is sent to a node that has gone"
