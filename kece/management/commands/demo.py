import logging.config
import os
import signal
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from kece.demo import Demo, sandbox_usable, say


def _stop_on_signal(signum, frame):
    raise KeyboardInterrupt


def readable_logs() -> None:
    """The demo is read by a person: its processes (this one, the server and the agents it
    starts, which inherit the environment) log as text, unless KECE_LOG_FORMAT says
    otherwise."""
    if "KECE_LOG_FORMAT" in os.environ:
        os.environ.setdefault("JUDGE_LOG_FORMAT", os.environ["KECE_LOG_FORMAT"])
        return
    os.environ["KECE_LOG_FORMAT"] = os.environ["JUDGE_LOG_FORMAT"] = "text"
    logging.config.dictConfig({**settings.LOGGING, "formatters": {"line": {"()": "kece.logging.TextFormatter"}}})


class Command(BaseCommand):
    help = ("Run the embedded demo: control plane + one local agent per available pool; "
            "registers, verifies and enables the nodes, then judges every sample solution.")

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--pools", default="", help="comma-separated pools (default: every pool available here)")
        parser.add_argument("--judge-mysql-url", default=os.environ.get("JUDGE_MYSQL_URL", "mysql://root:@127.0.0.1:3306/"))
        parser.add_argument("--no-wait", action="store_true", help="exit once every sample has its verdict")
        parser.add_argument("--state-dir", default=str(Path(settings.BASE_DIR) / "var" / "demo"),
                            help="logs, certificates and agent workspaces (default: var/demo)")

    def handle(self, *args, port, pools, judge_mysql_url, no_wait, state_dir, **options):
        if settings.DATABASE_VENDOR != "sqlite" or settings.REDIS_URL:
            raise CommandError("the demo runs on the embedded default: unset DATABASE_URL and REDIS_URL")
        readable_logs()
        state = Path(state_dir)
        state.mkdir(parents=True, exist_ok=True)
        # The embedded database's folder (var/ in a fresh checkout) may not exist yet.
        Path(settings.DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
        demo = Demo(port=port, state_dir=state, judge_mysql_url=judge_mysql_url,
                    pools=[p for p in pools.split(",") if p] or None)
        # Stopped by a service manager, `timeout` or a closed terminal as by Ctrl-C: the
        # server and the agents run in sessions of their own, so only `stop` ends them.
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _stop_on_signal)
        weak = not sandbox_usable()
        if weak:
            say("WARNING: bubblewrap is not usable here; the agents run user code with rlimits only")
        try:
            demo.prepare_database()
            available = demo.available_pools()
            if not available:
                raise CommandError("no pool can run on this machine")
            tls = demo.make_certificates()
            demo.start_server(tls)
            group = demo.admin.get(demo.base + "/api/v1/admin/host-groups").json()
            # One program per core across all the agents: more, and a program may be judged
            # TLE for time this machine did not give it.
            group = next((g for g in group if g["name"] == "this-machine"), None) or demo.admin.post(
                demo.base + "/api/v1/admin/host-groups",
                json={"name": "this-machine", "hostId": os.uname().nodename, "totalSlots": os.cpu_count() or 1}).json()
            nodes = {pool: demo.register_node(pool, group["id"]) for pool in available}
            for pool in available:
                demo.start_agent(pool, tls, weak)
            enabled = demo.verify_and_enable(nodes)
            say(f"open {demo.base}/admin/judgers (the console; sign in as admin), {demo.base}/ (homepage and"
                f" judge status), {demo.base}/problems (problems; sign in as"
                f" student to submit), {demo.base}/api/docs/ (API reference), {demo.base}/django-admin/ (tables)"
                f" — users admin and student, password {demo.password}")
            demo.follow(demo.submit_samples(enabled))
            if no_wait:
                return
            say("all samples judged; the control plane and agents keep running — Ctrl-C stops everything")
            while True:
                for process in demo.processes:
                    if process.poll() is not None:
                        raise CommandError(f"a demo process exited ({process.args[-1]}); see the logs in {state}")
                import time

                time.sleep(1)
        except KeyboardInterrupt:
            say("stopping")
        finally:
            demo.stop()
