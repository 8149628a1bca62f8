"""Bounded thread lanes for synchronous work under the ASGI server.

Django's ASGI handler runs a synchronous view (and each synchronous middleware, one hop
each) through `sync_to_async(thread_sensitive=True)`: a fresh thread per request, and with
it a fresh database connection, set up and torn down for every request. A lane is a small
fixed pool of threads instead, each keeping one database connection for its life, so a
request costs one hop to a warm thread and no connect; the lane's size bounds both the
threads and the connections a server process holds.

Work is split into lanes by kind (`kece.asgi`): the node API, the user-facing requests,
the administrators' requests. A lane that is full queues its own work only, so a burst of
slow console pages or rejudges cannot hold up a submission or a claim.
"""

import asyncio
import contextvars
import os
import queue
import threading
import time

from django.conf import settings
from django.db import connection, connections

from kece.errors import DomainError

IDLE_PING_SECONDS = 30.0
_thread_state = threading.local()


def _call_pooled(function, args, kwargs):
    """Run `function` on a lane thread, which keeps one database connection for its life.

    A connection idle for a while is pinged before use; a database error, escaped or
    handled by the task, closes it (the next task reconnects), and so does any other
    exception but the contract's own answers (a refused credential, a lost lease: the
    connection is fine, and a burst of them must not reconnect on every call).
    The connection is kept whatever CONN_MAX_AGE says: the lane is small and fixed, so its
    connections are too.
    """
    if connection.connection is not None and time.monotonic() - getattr(_thread_state, "last_use", 0) > \
            IDLE_PING_SECONDS and not connection.is_usable():
        connection.close()
    try:
        return function(*args, **kwargs)
    except DomainError:
        raise
    except BaseException:
        connection.close()
        raise
    finally:
        if connection.in_atomic_block or connection.needs_rollback or \
                (connection.connection is not None and not connection.autocommit):
            _drop_connection()  # never hand a half-open transaction to the next task
        elif connection.errors_occurred:
            # A database error the task handled itself (a view's error answer, a 503): the
            # connection may be dead (a server restart) or never made (a connect that
            # failed). Closed rather than pinged: on a stalled link a ping would hold this
            # answer for another read timeout, and the next task's connect is cheap.
            connection.close()
        _thread_state.last_use = time.monotonic()


def _drop_connection() -> None:
    """Close this thread's connection so that its next task starts on a new one. Closed
    inside an atomic block, Django keeps the wrapper's transaction state for the block's
    exit, which a task that left the block open never reaches: every later task on the
    thread would then fail (a durable block \"cannot be nested\"). Reset here as `connect`
    resets it."""
    connection.close()
    if connection.connection is not None:
        connection.connection = None
        connection.in_atomic_block = False
        connection.savepoint_ids = []
        connection.atomic_blocks = []
        connection.needs_rollback = False
        connection.closed_in_transaction = False


def _answer(future: asyncio.Future, result, error: BaseException | None) -> None:
    if future.cancelled():
        return  # the request went away; what ran is done, nobody waits for it
    if isinstance(error, StopIteration):
        # A future refuses StopIteration (it would end the awaiting coroutine as a return),
        # and the caller would wait for ever: it gets what asyncio.to_thread gives instead.
        replaced = RuntimeError("the task raised StopIteration")
        replaced.__cause__ = error
        error = replaced
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class Lane:
    """A named pool of at most `size_setting` threads (read when first used), fed by one
    queue.

    A hop is a queue put and one wake-up of the loop with the answer: without the executor's
    per-task future and the chaining of its future to the loop's, which cost the node API a
    tenth of its CPU. As with the executor, a thread is started only when none is idle, so a
    process holds as many threads, and connections, as its busiest moment needed.

    The threads are daemons: a server stops taking requests and finishes those in flight
    before its process exits, but a forced exit cuts what is running (its transaction rolls
    back; a wake-up it had yet to publish is replaced by the waiters' fallback poll). A
    forked child starts with no threads (`os.register_at_fork`).
    """

    def __init__(self, name: str, size_setting: str):
        self.name, self.size_setting = name, size_setting
        self._lock = threading.Lock()
        self._empty()
        _lanes.append(self)

    def _empty(self) -> None:
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for a task that no caller has counted on yet

    @property
    def size(self) -> int:
        return getattr(settings, self.size_setting)

    async def run(self, function, *args, **kwargs):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        # In the caller's context (as asyncio.to_thread would): the request id the log
        # lines carry (`kece.logging.request_id`) follows the request onto the lane's thread.
        task = (loop, future, contextvars.copy_context(), function, args, kwargs)
        with self._lock:
            if self._idle:
                self._idle -= 1  # an idle thread takes it
            elif len(self._threads) < self.size:
                thread = threading.Thread(target=self._serve, args=(self._tasks,),
                                          name=f"{self.name}_{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
            # else every thread is busy: the task waits in the queue for the first one free.
            # Put under the lock: never into the queue of a lane stopped meanwhile.
            self._tasks.put(task)
        return await future

    def _serve(self, tasks: queue.SimpleQueue) -> None:
        while True:
            task = tasks.get()
            if task is None:
                connections.close_all()  # this thread's
                return
            loop, future, context, function, args, kwargs = task
            result = error = None
            if not future.cancelled():  # given up on before it started: never run
                try:
                    result = context.run(_call_pooled, function, args, kwargs)
                except BaseException as exc:
                    error = exc
            # Idle before the answer goes: the caller's next task, sent as soon as it has the
            # answer, finds this thread rather than starting another.
            with self._lock:
                stopped = tasks is not self._tasks
                if not stopped:
                    self._idle += 1
            if not future.cancelled():
                try:
                    loop.call_soon_threadsafe(_answer, future, result, error)
                except RuntimeError:
                    pass  # the loop has closed: its server is gone
            # Nothing of this task outlives it while the thread waits for the next one.
            del task, loop, future, context, function, args, kwargs, result, error
            if stopped:
                connections.close_all()
                return

    def stop(self, timeout: float | None = None) -> None:
        """End the lane's threads once their tasks are done, closing their connections; the
        next task starts new ones."""
        with self._lock:
            threads, tasks = self._threads, self._tasks
            self._empty()
        for _ in threads:
            tasks.put(None)
        for thread in threads:
            thread.join(timeout)


_lanes: list[Lane] = []


def _forked() -> None:
    # The child has none of the parent's threads, and its lock may have been held at the fork.
    for lane in _lanes:
        lane._lock = threading.Lock()
        lane._empty()


os.register_at_fork(after_in_child=_forked)


# The node API: claims, results and the other machine calls (`judging.waiting.run_db`).
NODE = Lane("kece-db", "KECE_DB_THREADS")
# What users touch: submissions and their reads, the public status, the pages.
USER = Lane("kece-web", "KECE_WEB_THREADS")
# What administrators touch: the admin API (rejudge, checks), the console, Django's admin.
ADMIN = Lane("kece-admin", "KECE_ADMIN_THREADS")
