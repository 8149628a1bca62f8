"""The systems a user might run instead of KECE, on the acceptance workload (`acceptance.py`):

- Celery with the Redis broker, `acks_late` and a prefetch of one, a worker per node with a
  child process per slot (prefork: with the threads pool and `acks_late`, Redis hands each
  worker about one task a second once the first are prefetched);
- pollers on MariaDB: a thread per slot takes the next queued row with
  `FOR UPDATE SKIP LOCKED`, and looks again 100 ms later when there is none.

Both judge what KECE's simulated nodes judge (a sleep of the job's judge time) and write each
result to MariaDB in its own transaction, as KECE's settle does. The jobs are queued before
any worker takes one (Celery: sent to waiting workers as fast as the client can): the start
is when the workers may take them.
"""

import os
import subprocess
import sys
import threading
import time

try:
    from celery import Celery
except ImportError:  # the acceptance script imports this module only to run the peers
    Celery = None

DATABASE = "kece_bench_peers"
BROKER = os.environ.get("KECE_BENCH_PEERS_BROKER", "redis://127.0.0.1:6379/12")
QUEUE = "peers"
POLL_SECONDS = 0.1


def connect(database: str | None = DATABASE):
    import MySQLdb

    return MySQLdb.connect(host="127.0.0.1", user="root", port=3306, **({"db": database} if database else {}))


def prepare(judge_seconds: list[float]) -> list[int]:
    """A fresh table of queued jobs, one per judge time; their ids in order."""
    conn = connect(None)
    try:
        cursor = conn.cursor()
        cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{DATABASE}`")
        cursor.execute(f"USE `{DATABASE}`")
        cursor.execute("DROP TABLE IF EXISTS peer_job")
        cursor.execute("CREATE TABLE peer_job (id INT AUTO_INCREMENT PRIMARY KEY, judge_ms INT NOT NULL,"
                       " state TINYINT NOT NULL DEFAULT 0, node VARCHAR(64) NOT NULL DEFAULT '',"
                       " verdict VARCHAR(8) NOT NULL DEFAULT '', score INT, finished DOUBLE,"
                       " KEY peer_job_state (state, id)) ENGINE=InnoDB")
        cursor.executemany("INSERT INTO peer_job (judge_ms) VALUES (%s)", [(round(s * 1000),) for s in judge_seconds])
        conn.commit()
        cursor.execute("SELECT id FROM peer_job ORDER BY id")
        return [row[0] for row in cursor.fetchall()]
    finally:
        conn.close()


def finished() -> tuple[int, float]:
    """(jobs done, the last one's finish time as perf_counter)."""
    conn = connect()
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT COUNT(*), MAX(finished) FROM peer_job WHERE state = 2")
        done, last = cursor.fetchone()
        return int(done), float(last or 0.0)
    finally:
        conn.close()


def finish_times() -> list[float]:
    """Every judged job's finish time (perf_counter), latest last."""
    conn = connect()
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT finished FROM peer_job WHERE state = 2 ORDER BY finished")
        return [float(finished) for (finished,) in cursor.fetchall()]
    finally:
        conn.close()


_local = threading.local()


def _connection():
    if getattr(_local, "conn", None) is None:
        _local.conn = connect()
    return _local.conn


def judge_and_store(conn, job_id: int, judge_ms: int, node: str) -> None:
    """Judge (sleep) and write the result in its own transaction."""
    time.sleep(judge_ms / 1000)
    cursor = conn.cursor()
    cursor.execute("UPDATE peer_job SET state = 2, verdict = 'AC', score = 100, node = %s, finished = %s"
                   " WHERE id = %s", [node, time.perf_counter(), job_id])
    conn.commit()


if Celery is not None:
    app = Celery("peers", broker=BROKER)
    app.conf.update(task_acks_late=True, worker_prefetch_multiplier=1, task_default_queue=QUEUE,
                    worker_hijack_root_logger=False, broker_connection_retry_on_startup=True)

    @app.task(name="peers.judge")
    def judge(job_id: int) -> None:
        conn = _connection()
        cursor = conn.cursor()
        cursor.execute("SELECT judge_ms FROM peer_job WHERE id = %s", [job_id])
        (judge_ms,) = cursor.fetchone()
        conn.commit()
        judge_and_store(conn, job_id, judge_ms, f"celery-{os.getpid()}")


def celery_workers(nodes: int, slots: int) -> list:
    """`nodes` workers of `slots` child processes each."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    return [subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "bench.peers", "worker", "-P", "prefork", "-c", str(slots),
         "-Q", QUEUE, "-n", f"peer{i}-{os.getpid()}@%h", "--loglevel", "WARNING", "--without-gossip",
         "--without-mingle", "--without-heartbeat"], cwd=root, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True) for i in range(nodes)]


def celery_ready(workers: list) -> None:
    """Once every worker answers."""
    deadline = time.monotonic() + 60
    while len(app.control.ping(timeout=0.5)) < len(workers):
        if time.monotonic() > deadline:
            raise RuntimeError("the Celery workers did not start")


def celery_run(job_ids: list[int]) -> float:
    """Send every job as fast as the client can (the workers start on the first ones
    meanwhile); the start (perf_counter)."""
    start = time.perf_counter()
    with app.producer_or_acquire() as producer:
        for job_id in job_ids:
            judge.apply_async((job_id,), queue=QUEUE, producer=producer)
    return start


def _poller(node: str, go, stop) -> None:
    conn = connect()
    go.wait()
    cursor = conn.cursor()
    while not stop.is_set():
        cursor.execute("SELECT id, judge_ms FROM peer_job WHERE state = 0 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED")
        row = cursor.fetchone()
        if row is None:
            conn.commit()
            time.sleep(POLL_SECONDS)
            continue
        cursor.execute("UPDATE peer_job SET state = 1, node = %s WHERE id = %s", [node, row[0]])
        conn.commit()
        judge_and_store(conn, row[0], row[1], node)
    conn.close()


def poller_process(slots: int, go, stop) -> None:
    """A node: `slots` polling threads."""
    threads = [threading.Thread(target=_poller, args=(f"poller-{os.getpid()}-{i}", go, stop)) for i in range(slots)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
