"""A simulated judge node for the lab, run on an agent host: it speaks the node API as an
agent written from the contract would (claim by long poll, renew its leases, post each result
and post it again until it has an answer), judges by sleeping, and writes every claim and
every result answer to a history file (JSON lines) for the checker.

    python -m bench.lab.agent --url https://10.213.0.10:8443 --secret S --session 1 \
        --node 7 --slots 2 --judge-s 0.2 --renew-s 2 --history FILE
"""

import argparse
import json
import os
import socket
import threading
import time

import requests
import urllib3

PREFIX = "/api/v1/internal/judgers/"
urllib3.disable_warnings()  # the lab's own self-signed certificate


class Agent:
    def __init__(self, args):
        self.args = args
        self.url = args.url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {args.secret}", "X-Judge-Session": str(args.session)}
        self.held: dict[int, int] = {}  # job id -> lease epoch
        self.lock = threading.Lock()
        self.free = threading.Semaphore(args.slots)
        self.out = open(args.history, "a", buffering=1)

    def record(self, kind: str, **fields) -> None:
        with self.lock:
            # t: this host's wall clock (skewed in some scenarios); mono: the machine's monotonic
            # clock, which every lab process shares, for durations across hosts.
            self.out.write(json.dumps({"t": time.time(), "mono": time.monotonic(), "kind": kind,
                                       "node": self.args.node, **fields}) + "\n")

    def post(self, path: str, body: dict, timeout: float):
        return requests.post(self.url + PREFIX + path, json=body, headers=self.headers, timeout=timeout, verify=False)

    def claim_loop(self) -> None:
        wait_ms, claimed = self.args.wait_ms, 0
        while not self.args.jobs or claimed < self.args.jobs:
            self.free.acquire()
            free = 1
            while self.free.acquire(blocking=False):
                free += 1
            try:
                answer = self.post("jobs/claim", {"freeSlots": free, "waitMs": wait_ms}, timeout=wait_ms / 1000 + 10)
                jobs = answer.json().get("jobs", []) if answer.status_code == 200 else []
            except (requests.RequestException, ValueError):
                jobs = []
                time.sleep(0.5)
            claimed += len(jobs)
            for job in jobs:
                self.record("claim", job=job["jobId"], epoch=job["leaseEpoch"])
                with self.lock:
                    self.held[job["jobId"]] = job["leaseEpoch"]
                threading.Thread(target=self.judge, args=(job,), daemon=True).start()
            for _ in range(free - len(jobs)):
                self.free.release()
        threading.Event().wait()  # its jobs judged and renewed until it is stopped

    def ask_judge_db(self) -> None:
        """What a SQL job needs of the pool's judge database: an answer. Asked without a
        timeout, as a statement in flight waits for its server: a stalled judge database
        holds the job (its lease renewed meanwhile) until it answers again."""
        host, port = self.args.judge_db.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as link:
            link.sendall(b"PING\r\n")
            link.recv(16)

    def judge(self, job: dict) -> None:
        if self.args.judge_db:
            self.ask_judge_db()
        time.sleep(self.args.judge_s)
        cases = [{"ordinal": c["ordinal"], "verdict": "AC", "timeMs": 1, "memoryKb": 1, "score": c["weight"]}
                 for c in job["cases"]]
        body = {"leaseEpoch": job["leaseEpoch"], "outcome": "JUDGED", "verdict": "AC", "score": 100, "timeMs": 1,
                "memoryKb": 1, "compileOutput": "", "cases": cases}
        # The same result again until an answer comes: a lost answer is answered `duplicate`.
        while True:
            try:
                answer = self.post(f"jobs/{job['jobId']}/result", body, timeout=10)
            except requests.RequestException as error:
                self.record("result_try", job=job["jobId"], epoch=job["leaseEpoch"], error=type(error).__name__)
                time.sleep(0.5)
                continue
            if answer.status_code >= 500:
                self.record("result_try", job=job["jobId"], epoch=job["leaseEpoch"], error=str(answer.status_code))
                time.sleep(0.5)
                continue
            try:
                data = answer.json()
            except ValueError:
                data = {}
            self.record("result", job=job["jobId"], epoch=job["leaseEpoch"], http=answer.status_code,
                        status=data.get("status"), error=data.get("error"))
            break
        with self.lock:
            self.held.pop(job["jobId"], None)
        self.free.release()

    def renew_loop(self) -> None:
        while True:
            time.sleep(self.args.renew_s)
            with self.lock:
                items = [{"jobId": job, "leaseEpoch": epoch, "progress": {"phase": "JUDGING", "testcase": 1}}
                         for job, epoch in self.held.items()]
            for start in range(0, len(items), 64):
                try:
                    answer = self.post("jobs/renew", {"leases": items[start:start + 64]}, timeout=5)
                    for lease in answer.json().get("leases", []):
                        if not lease.get("ok"):
                            self.record("renew_refused", job=lease["jobId"], error=lease.get("error"))
                except (requests.RequestException, ValueError):
                    pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--session", type=int, required=True)
    parser.add_argument("--node", type=int, required=True)
    parser.add_argument("--slots", type=int, default=1)
    parser.add_argument("--judge-s", type=float, default=0.2)
    parser.add_argument("--renew-s", type=float, default=2.0)
    parser.add_argument("--wait-ms", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=0, help="claim no more than this many (0: no limit)")
    parser.add_argument("--history", required=True)
    parser.add_argument("--judge-db", default=os.environ.get("LAB_JUDGE_DB", ""),
                        help="host:port of the judge database each job asks first (a Redis PING stands in)")
    agent = Agent(parser.parse_args())
    agent.record("started")
    threading.Thread(target=agent.renew_loop, daemon=True).start()
    agent.claim_loop()


if __name__ == "__main__":
    main()
