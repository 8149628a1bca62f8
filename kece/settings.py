"""Settings, read strictly from the environment (ARCHITECTURE §8).

Defaults are the embedded mode: SQLite in the project, in-process wake-ups, cache and
scheduler. Production sets DATABASE_URL (MySQL/MariaDB) and REDIS_URL.
"""

import ipaddress
import re
import tempfile
import zoneinfo
from datetime import timedelta
from pathlib import Path

import environ
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()


def _secret(name: str, default=None):
    """A secret from NAME, or from the file named by NAME_FILE (container secrets)."""
    path = env.str(f"{name}_FILE", default="")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path!r} cannot be read: {exc}") from exc
    return env.str(name, default=default)


def _positive_ms(name: str, default: int) -> int:
    value = env.int(name, default=default)
    if value <= 0:
        raise ImproperlyConfigured(f"{name} must be a positive number of milliseconds, got {value}")
    return value


def _count(name: str, default: int, *, minimum: int) -> int:
    try:
        value = env.int(name, default=default)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise ImproperlyConfigured(f"{name} must be a whole number of at least {minimum}")
    return value


def _seconds(name: str, default: int, *, none: int | None = None) -> int:
    """Whole seconds (mysqlclient's timeouts are); `none`: the value that means no bound."""
    try:
        value = env.int(name, default=default)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a whole number of seconds: {exc}") from exc
    if value <= 0 and value != none:
        allowed = "a positive number of seconds" + (f" or {none} (none)" if none is not None else "")
        raise ImproperlyConfigured(f"{name} must be {allowed}, got {value}")
    return value


DEBUG = env.bool("DEBUG", default=False)

SECRET_KEY = _secret("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) must be set unless DEBUG=1")
    SECRET_KEY = "kece-development-only-secret-key-not-for-production"

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
CSRF_FAILURE_VIEW = "kece.views.csrf_failure"
# Outside development the site is served over HTTPS only (deploy/compose/nginx.conf), so the
# session and CSRF cookies never travel in clear. uvicorn --proxy-headers takes the scheme
# from the proxy's X-Forwarded-Proto; Django itself trusts no such header from a client.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = not DEBUG
# Reverse proxies in front of the server whose X-Forwarded-For the join throttle reads itself.
# With 0 it counts the connection's address as the server settled it: behind uvicorn's
# --proxy-headers, the proxy's header only from the addresses --forwarded-allow-ips names
# (compose: 0, its servers believing only the proxy's network), so a client that reaches the
# server some other way cannot choose the address counted.
KECE_NUM_PROXIES = env.int("KECE_NUM_PROXIES", default=0)
if KECE_NUM_PROXIES < 0:
    raise ImproperlyConfigured("KECE_NUM_PROXIES must be 0 or more")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "kece",
    "pools",
    "nodes",
    "judging",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "kece.timezones.DisplayTimeZoneMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: turns a refused sign-in into `kece.signin.refused`'s page.
    "axes.middleware.AxesMiddleware",
]

# Content-Security-Policy on every page: scripts, styles, fonts and connections (the
# console's WebSocket included) only from the site itself, no inline script or style, so a
# string that escaped its escaping runs nothing. Images may also come from any https: host
# or data: (problem statements embed them). The API reference's Swagger UI is served split,
# its start-up script a file of its own (`kece.views.api_docs`).
CONTENT_SECURITY_POLICY = {"DIRECTIVES": {
    "default-src": [SELF], "script-src": [SELF], "style-src": [SELF], "img-src": [SELF, "https:", "data:"],
    "font-src": [SELF], "connect-src": [SELF], "object-src": [NONE], "base-uri": [NONE], "form-action": [SELF],
    "frame-ancestors": [NONE],
}}

# Paths of the contract never end in a slash and never redirect.
APPEND_SLASH = False

ROOT_URLCONF = "kece.urls"
ASGI_APPLICATION = "kece.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "pools.context_processors.judge_status",
                "kece.context_processors.language_switch",
                "kece.context_processors.time_zone",
            ],
        },
    },
]

# --- database -------------------------------------------------------------------------

# DATABASE_URL_FILE and REDIS_URL_FILE as the entry point reads them (`kece-entrypoint`): a
# command run without it (`manage.py reconcile` in a container) reaches the same database,
# not a SQLite file of its own.
DATABASES = {"default": env.db_url_config(
    _secret("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'var' / 'kece.sqlite3'}"))}
DATABASE_VENDOR = "sqlite" if DATABASES["default"]["ENGINE"].endswith("sqlite3") else "mysql"
if DATABASE_VENDOR == "sqlite":
    # SQLite ignores row locks: one writer at a time (IMMEDIATE) keeps claims correct, WAL
    # keeps readers off the writer's back. Serial, but right (ARCHITECTURE §7).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;",
        }
    )
else:
    if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
        DATABASES["default"]["ENGINE"] = "kece.mysql"  # Django's, with one-statement BEGIN
    options = DATABASES["default"].setdefault("OPTIONS", {})
    options.setdefault("isolation_level", "read committed")
    options.setdefault("charset", "utf8mb4")
    # What the code relies on, whatever the server's defaults: a value that does not fit is
    # an error, never cut short or replaced (strict); and times in SQL are UTC (a server kept
    # in local time would otherwise read an hour off in daylight saving's repeated hour).
    options.setdefault("init_command", "SET sql_mode = 'STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
                                       "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION', time_zone = '+00:00'")
    # A database host that stops answering (a cut link, a paused server) fails a request
    # within these bounds, answered 503 with Retry-After, instead of holding it, its thread
    # and its client for as long as the outage lasts. The web tier's statements take
    # milliseconds (a lock wait under load, tens of them) and periodic work goes in small
    # batches, so 10 s is far from any legitimate statement; the few that scan whole tables
    # (`migrate`, `reconcile`) run without the read and write bounds (`kece.mysql`).
    options.setdefault("connect_timeout", _seconds("KECE_DB_CONNECT_TIMEOUT_S", 5))
    for option, name in (("read_timeout", "KECE_DB_READ_TIMEOUT_S"), ("write_timeout", "KECE_DB_WRITE_TIMEOUT_S")):
        bound = _seconds(name, 10, none=0)
        if bound:
            options.setdefault(option, bound)
    DATABASES["default"].setdefault("TEST", {})
    DATABASES["default"]["TEST"].setdefault("CHARSET", "utf8mb4")
    DATABASES["default"]["TEST"].setdefault("COLLATION", "utf8mb4_unicode_ci")
DATABASES["default"]["CONN_MAX_AGE"] = env.int("KECE_CONN_MAX_AGE", default=0)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- redis: cache, wake-ups, celery broker ---------------------------------------------

REDIS_URL = _secret("REDIS_URL", default="")


def _sentinels(name: str) -> list[tuple[str, int]]:
    """"sentinel-1:26379,sentinel-2:26379" → [("sentinel-1", 26379), ("sentinel-2", 26379)]."""
    found = []
    for item in env.list(name, default=[]):
        host, _, port = item.strip().rpartition(":")
        try:
            number = int(port)
        except ValueError:
            number = 0
        if not host or not 1 <= number <= 65535:
            raise ImproperlyConfigured(f"{name}: {item!r} is not host:port")
        found.append((host.strip("[]"), number))
    return found


# Redis behind Sentinel: every process (cache, wake-ups, the console's channel layer, the
# Celery broker) asks these Sentinels which server is the primary, and asks again when that
# server goes away or turns out to be a read-only replica, so a failover needs no restart.
# REDIS_URL then gives only the database number and the data servers' password (its host is
# not used); the Sentinels' own password is REDIS_SENTINEL_PASSWORD (or _FILE).
REDIS_SENTINELS = _sentinels("REDIS_SENTINELS")
REDIS_SENTINEL_MASTER = env.str("REDIS_SENTINEL_MASTER", default="")
REDIS_SENTINEL_PASSWORD = _secret("REDIS_SENTINEL_PASSWORD", default="")
if REDIS_SENTINELS:
    if not re.fullmatch(r"[A-Za-z0-9._-]+", REDIS_SENTINEL_MASTER):
        raise ImproperlyConfigured("REDIS_SENTINEL_MASTER must name the Sentinels' master when REDIS_SENTINELS is set,"
                                   f" got {REDIS_SENTINEL_MASTER!r}")
    REDIS_URL = REDIS_URL or f"redis://{REDIS_SENTINEL_MASTER}/0"
    if not REDIS_URL.startswith(("redis://", "rediss://")):
        raise ImproperlyConfigured(f"REDIS_URL must be a redis:// URL (its database and password) with REDIS_SENTINELS")
elif REDIS_SENTINEL_MASTER or REDIS_SENTINEL_PASSWORD:
    raise ImproperlyConfigured("REDIS_SENTINEL_MASTER and REDIS_SENTINEL_PASSWORD need REDIS_SENTINELS")


def _redis_data_params() -> dict:
    """The database, user and password REDIS_URL gives for the data servers."""
    from redis.connection import parse_url

    try:
        parsed = parse_url(REDIS_URL)
    except ValueError as exc:
        raise ImproperlyConfigured(f"REDIS_URL: {exc}") from exc
    return {key: parsed[key] for key in ("db", "username", "password") if parsed.get(key) is not None}


REDIS_DATA_PARAMS = _redis_data_params() if REDIS_SENTINELS else {}


def _dead_link_options() -> dict:
    """A Redis host cut off drops packets rather than refusing them. A connection waiting on
    it (the wake-up subscription, the broker's BRPOP) would notice only when the host came
    back, perhaps demoted meanwhile: the worker would go on consuming from the old primary
    while beat publishes the reaper's ticks to the new one. With these the kernel ends such a
    connection within about 5 s, idle (keepalive probes) or waiting for an answer (the user
    timeout), and the client reconnects to whichever server the Sentinels name then."""
    import socket

    wanted = {"TCP_KEEPIDLE": 2, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 3, "TCP_USER_TIMEOUT": 5000}
    options = {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}
    return {"socket_keepalive": True, "socket_keepalive_options": options}


REDIS_LINK_OPTIONS = _dead_link_options()
# How the Sentinels themselves are asked: a Sentinel that does not answer within a second is
# passed over for the next. Asked once (`retry: None`): redis-py's default asks a Sentinel that
# times out (its host cut off) three times more, with backoffs of up to 8 s between, before the
# next one, and a client finding the primary waited that long without a word.
REDIS_SENTINEL_KWARGS = {"password": REDIS_SENTINEL_PASSWORD or None, "socket_timeout": 1, "socket_connect_timeout": 1,
                         "retry": None}

# The cache's commands are small and answered at once: a Redis that accepts connections and
# answers nothing (a stalled host, a paused server) must fail them within a second, as down
# (the pages, the snapshot and the rates go on without it), not hold every request for good.
CACHE_LINK_OPTIONS = {"socket_connect_timeout": 1, "socket_timeout": 1, **REDIS_LINK_OPTIONS}
# Once a cache command or a wake-up hint finds Redis not answering, a process asks it nothing
# more for its requests and tries it again from a thread of its own this often
# (`kece.redis_clients.Outage`): a stalled Redis costs one timeout a process, not one a request.
KECE_REDIS_RETRY_S = _seconds("KECE_REDIS_RETRY_S", 2)
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "kece.cache.SharedClientRedisCache", "LOCATION": REDIS_URL,
                          "OPTIONS": dict(CACHE_LINK_OPTIONS)}}
    if REDIS_SENTINELS:
        CACHES["default"]["OPTIONS"]["sentinels"] = True
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "kece"}}

# The console's live updates (`nodes.console.live`): across processes through Redis, within
# the one web process of the embedded default in memory.
# Bounded waits on its connections, as on the broker's: without them a console socket's
# receive (a BZPOPMIN of 5 s), or a publish, waiting on a primary cut off would wait for good,
# and the pool connects under its lock, so every socket of the process with it.
CHANNEL_LINK_OPTIONS = {"socket_connect_timeout": 2, "socket_timeout": 10, **REDIS_LINK_OPTIONS,
                        "health_check_interval": 10}
if REDIS_URL:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                  "CONFIG": {"hosts": [{"address": REDIS_URL, **CHANNEL_LINK_OPTIONS}],
                                             "capacity": 200, "expiry": 10}}}
    if REDIS_SENTINELS:
        CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] = [{
            "sentinels": REDIS_SENTINELS, "master_name": REDIS_SENTINEL_MASTER,
            "sentinel_kwargs": REDIS_SENTINEL_KWARGS, **REDIS_DATA_PARAMS, **CHANNEL_LINK_OPTIONS}]
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

CELERY_BROKER_URL = REDIS_URL or "memory://"
# Bounded waits on the broker's own connections: a Redis host cut off drops packets rather
# than refusing them, and a worker or beat blocked on such a socket would never reconnect
# (to the replica Sentinel promotes, or to the same server once it is back) — the reaper
# would stop with it. Kombu polls with BRPOP for 1 s, well inside these.
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_timeout": 5, "socket_connect_timeout": 5, **REDIS_LINK_OPTIONS,
                                   "health_check_interval": 10}
if REDIS_SENTINELS:
    # Kombu's Sentinel transport: one sentinel:// address per Sentinel, each carrying the
    # data servers' password and database.
    from urllib.parse import quote

    _auth = ""
    if REDIS_DATA_PARAMS.get("password") is not None:
        _auth = f"{quote(REDIS_DATA_PARAMS.get('username') or '', safe='')}:" \
                f"{quote(REDIS_DATA_PARAMS['password'], safe='')}@"
    CELERY_BROKER_URL = ";".join(f"sentinel://{_auth}{'[%s]' % host if ':' in host else host}:{port}/"
                                 f"{REDIS_DATA_PARAMS.get('db', 0)}" for host, port in REDIS_SENTINELS)
    CELERY_BROKER_TRANSPORT_OPTIONS.update(master_name=REDIS_SENTINEL_MASTER, sentinel_kwargs=REDIS_SENTINEL_KWARGS)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# `celery worker --beat` keeps its schedule with the other state, not in the working folder.
CELERY_BEAT_SCHEDULE_FILENAME = str(BASE_DIR / "var" / "celerybeat-schedule")
# The worker reconnects to the broker within seconds of its return (Kombu's default waits up to
# 32 s), and never gives up: after Celery's default 100 tries (a few minutes at that pace) it
# would exit, and a restarting container only waits longer.
CELERY_WORKER_CONSUMER = "kece.celery:PromptReconnectConsumer"
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# Beat ticks at least this often, each tick a sign of life for `python -m kece.probe beat`.
CELERY_BEAT_SCHEDULER = "kece.celery:HeartbeatScheduler"
CELERY_BEAT_MAX_LOOP_INTERVAL = 30  # kece.probe.INTERVAL_S["beat"]
# Where the worker and beat leave their heartbeat files for `python -m kece.probe`.
KECE_PROCESS_HEARTBEAT_DIR = env.str("KECE_PROCESS_HEARTBEAT_DIR", default=tempfile.gettempdir())
# Node checks wait on other machines: they have a queue (and, deployed, a worker) of their
# own, so that a slow health endpoint never delays the reaper or the event dispatcher. A
# worker started without --queues serves both.
CELERY_TASK_QUEUES = {name: {"exchange": name, "routing_key": name} for name in ("celery", "probes")}
CELERY_TASK_ROUTES = {"nodes.run_check": {"queue": "probes"}}

# Without Redis the web process runs the periodic work itself (reaper, events, snapshot).
KECE_IN_PROCESS_SCHEDULER = env.bool("KECE_IN_PROCESS_SCHEDULER", default=not REDIS_URL)

# --- auth, i18n, static ------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
]
# Password sign-in (the site's form and the Django admin's) refused for an account and a
# client address together after KECE_SIGNIN_FAILURES wrong passwords, for
# KECE_SIGNIN_LOCKOUT_MINUTES, checked before any password is hashed (`kece.signin`).
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env.int("KECE_SIGNIN_FAILURES", default=5)
if AXES_FAILURE_LIMIT < 1:
    raise ImproperlyConfigured("KECE_SIGNIN_FAILURES must be at least 1")
_signin_lockout_minutes = env.int("KECE_SIGNIN_LOCKOUT_MINUTES", default=15)
if _signin_lockout_minutes < 1:
    raise ImproperlyConfigured("KECE_SIGNIN_LOCKOUT_MINUTES must be at least 1")
AXES_COOLOFF_TIME = timedelta(minutes=_signin_lockout_minutes)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# A try while refused is not another failure: the wait ends when the page said it would.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_DISABLE_ACCESS_LOG = True  # failures only, each kept until its lockout time has passed
AXES_LOCKOUT_CALLABLE = "kece.signin.refused"
AXES_CLIENT_IP_CALLABLE = "kece.signin.client_address"
AXES_SENSITIVE_PARAMETERS = []  # the logs name the account and the address (never the password)
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
# Signed out: the homepage, not the Django admin's "Logged out" page.
LOGOUT_REDIRECT_URL = "/"
LANGUAGE_CODE = "en"
# English by default; Simplified Chinese chosen by the browser's Accept-Language or the
# language switch in the top bar (a cookie).
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
# The switch's choice outlives the browser's session: a student on a lab machine whose
# browser asks for English chooses Chinese once, not at every start.
LANGUAGE_COOKIE_AGE = 365 * 24 * 3600
LANGUAGE_COOKIE_SAMESITE = "Lax"
LANGUAGE_COOKIE_SECURE = SESSION_COOKIE_SECURE
LOCALE_PATHS = [BASE_DIR / "locale"]
# The database, the API and the logs keep UTC. Pages show (and read typed) times in the
# school's zone, KECE_TIME_ZONE: an IANA name such as Asia/Shanghai (`kece.timezones`).
TIME_ZONE = "UTC"
KECE_TIME_ZONE = env.str("KECE_TIME_ZONE", default="UTC")
try:
    zoneinfo.ZoneInfo(KECE_TIME_ZONE)
except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as _exc:
    raise ImproperlyConfigured(f"KECE_TIME_ZONE must name a time zone such as Asia/Shanghai or UTC, got "
                               f"{KECE_TIME_ZONE!r}") from _exc
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "var" / "static"
# Serve /static/ from the app itself, for a server with no proxy in front (the embedded
# default); behind the production proxy it serves the collected files instead.
KECE_SERVE_STATIC = env.bool("KECE_SERVE_STATIC", default=DEBUG)

DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024  # the contract's 1 MiB body limit

# --- KECE ----------------------------------------------------------------------------------

KECE_ARTIFACT_ROOT = Path(env.str("KECE_ARTIFACT_ROOT", default=str(BASE_DIR / "var" / "artifacts")))
KECE_LEASE_TTL_MS = _positive_ms("KECE_LEASE_TTL_MS", 60000)
# Prometheus metrics (`kece.metrics`): the folder every process of one deployment (web
# workers, Celery workers, the embedded default) keeps its counters and histograms in, one
# subfolder per process group; `/metrics` reads them all. The bearer token `/metrics` asks
# for, if set.
KECE_METRICS_DIR = Path(env.str("KECE_METRICS_DIR", default=str(BASE_DIR / "var" / "metrics")))
if not KECE_METRICS_DIR.is_absolute():
    raise ImproperlyConfigured(f"KECE_METRICS_DIR must be an absolute path, got {str(KECE_METRICS_DIR)!r}")
# A Celery worker whose metrics folder web cannot read (Kubernetes: one per pod) serves its
# own counters on this port (`kece.metrics_endpoint.serve_this_hosts_files`); 0: off.
try:
    KECE_WORKER_METRICS_PORT = env.int("KECE_WORKER_METRICS_PORT", default=0)
except ValueError:
    KECE_WORKER_METRICS_PORT = -1
if not 0 <= KECE_WORKER_METRICS_PORT <= 65535:
    raise ImproperlyConfigured("KECE_WORKER_METRICS_PORT must be a port number, or 0 (off)")
KECE_METRICS_TOKEN = _secret("KECE_METRICS_TOKEN", default="")
if KECE_METRICS_TOKEN and (len(KECE_METRICS_TOKEN) < 16 or not KECE_METRICS_TOKEN.isprintable()
                           or " " in KECE_METRICS_TOKEN):
    raise ImproperlyConfigured("KECE_METRICS_TOKEN must be at least 16 printable characters without spaces")
KECE_RENEW_INTERVAL_MS = _positive_ms("KECE_RENEW_INTERVAL_MS", 15000)
if KECE_LEASE_TTL_MS < 2 * KECE_RENEW_INTERVAL_MS:
    # A node must get two renewals in per lease, or a single late one loses the job.
    raise ImproperlyConfigured("KECE_LEASE_TTL_MS must be at least twice KECE_RENEW_INTERVAL_MS")
KECE_HEARTBEAT_INTERVAL_MS = _positive_ms("KECE_HEARTBEAT_INTERVAL_MS", 10000)
KECE_OFFLINE_AFTER_MS = _positive_ms("KECE_OFFLINE_AFTER_MS", 30000)
KECE_CLAIM_WAIT_MS = _positive_ms("KECE_CLAIM_WAIT_MS", 15000)
KECE_REAP_INTERVAL_MS = _positive_ms("KECE_REAP_INTERVAL_MS", 5000)
KECE_EVENT_INTERVAL_MS = _positive_ms("KECE_EVENT_INTERVAL_MS", 2000)
KECE_SNAPSHOT_INTERVAL_MS = _positive_ms("KECE_SNAPSHOT_INTERVAL_MS", 5000)
# A web process answers from the snapshot it last read for this long before reading the
# cache again (0: every visit reads it). The summary already lets any cache share it for 5 s.
KECE_STATUS_REUSE_MS = env.int("KECE_STATUS_REUSE_MS", default=1000)
if KECE_STATUS_REUSE_MS < 0:
    raise ImproperlyConfigured(f"KECE_STATUS_REUSE_MS must be 0 or more milliseconds, got {KECE_STATUS_REUSE_MS}")
# How often an open page refreshes the judge status panel and top bar (paused while hidden).
KECE_STATUS_REFRESH_MS = _positive_ms("KECE_STATUS_REFRESH_MS", 30000)
# The console compares its per-pool figures this often and tells open pages what changed;
# an open page hears at most one message per such interval.
KECE_CONSOLE_PUBLISH_MS = _positive_ms("KECE_CONSOLE_PUBLISH_MS", 1000)
KECE_MAX_ATTEMPTS = _count("KECE_MAX_ATTEMPTS", 3, minimum=1)
# Waiting claims: the per-pool fallback check interval and the bounded database threads.
KECE_CLAIM_FALLBACK_MS = _positive_ms("KECE_CLAIM_FALLBACK_MS", 1000)
KECE_DB_THREADS = env.int("KECE_DB_THREADS", default=4)
# The web lanes (`kece.lanes`): threads, each with its database connection, per server
# process for what users touch (submissions, reads, pages) and for what admins touch.
KECE_WEB_THREADS = env.int("KECE_WEB_THREADS", default=4)
KECE_ADMIN_THREADS = env.int("KECE_ADMIN_THREADS", default=4)
for _lane in ("KECE_DB_THREADS", "KECE_WEB_THREADS", "KECE_ADMIN_THREADS"):
    if globals()[_lane] < 1:
        raise ImproperlyConfigured(f"{_lane} must be at least 1")
KECE_JOIN_THROTTLE = env.str("KECE_JOIN_THROTTLE", default="20/min").strip()
# DRF's rate: a count, "/", and a period of which DRF reads the first letter (s, m, h or d);
# anything else would fail every join, answered 503, instead of stopping the start.
if not re.fullmatch(r"[1-9]\d*/[smhd][a-z]*", KECE_JOIN_THROTTLE):
    raise ImproperlyConfigured(f"KECE_JOIN_THROTTLE: {KECE_JOIN_THROTTLE!r} is not a rate such as 20/min, 5/s,"
                               " 600/hour or 1000/day")
KECE_RETRY_BACKOFF_MS = _positive_ms("KECE_RETRY_BACKOFF_MS", 2000)
KECE_EVENT_MAX_ATTEMPTS = _count("KECE_EVENT_MAX_ATTEMPTS", 8, minimum=1)
# A submit's Idempotency-Key names its submission at least this long (the contract: 24 h).
KECE_IDEMPOTENCY_TTL_S = max(env.int("KECE_IDEMPOTENCY_TTL_S", default=86400), 86400)
# How often ended exams are handed in for participants who did not, and old keys dropped.
KECE_EXAM_INTERVAL_MS = _positive_ms("KECE_EXAM_INTERVAL_MS", 5000)

# Dispatch under pressure (`judging.priority`, `judging.pressure`): no job waits longer than
# this behind newer work of a higher class; a user's practice jobs beyond this many active
# ones in a pool queue behind everyone else's (0: no limit).
KECE_MAX_CLASS_WAIT_S = env.int("KECE_MAX_CLASS_WAIT_S", default=600)
KECE_USER_INFLIGHT = env.int("KECE_USER_INFLIGHT", default=4)
if KECE_MAX_CLASS_WAIT_S < 1 or KECE_USER_INFLIGHT < 0:
    raise ImproperlyConfigured("KECE_MAX_CLASS_WAIT_S must be at least 1 and KECE_USER_INFLIGHT not negative")


def _per_pool(name: str, default: str) -> dict[str, int]:
    """"2000" (every pool) or "2000,java=500" (with exceptions) → {"*": 2000, "java": 500}; 0 is no limit."""
    limits = {}
    for item in env.list(name, default=[default]):
        pool, _, value = item.strip().rpartition("=")
        try:
            limits[pool.strip() or "*"] = int(value)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name}: {item!r} is not a number or pool=number") from exc
        if limits[pool.strip() or "*"] < 0:
            raise ImproperlyConfigured(f"{name}: {item!r} is negative")
    return limits


# Backpressure (`judging.pressure`): per pool, the queued exam and practice jobs and the wait
# of the next job to be claimed beyond which practice submits are refused (429) and bulk
# rejudges pause; the Retry-After they are told.
KECE_THROTTLE_BACKLOG = _per_pool("KECE_THROTTLE_BACKLOG", "2000")
KECE_THROTTLE_WAIT_S = _per_pool("KECE_THROTTLE_WAIT_S", "600")
KECE_THROTTLE_RETRY_S = env.int("KECE_THROTTLE_RETRY_S", default=20)
# How long a process goes on deciding practice submits on a pool's backlog and head of line
# as it last read them (seconds; 0: read them on every submit). Counting the backlog reads
# up to KECE_THROTTLE_BACKLOG index entries, on every submit, just when a pool is behind.
KECE_PRESSURE_REFRESH_S = _seconds("KECE_PRESSURE_REFRESH_S", 1, none=0)


def _rate(name: str, default: str) -> tuple[int, int] | None:
    """"30/min" (also "5/s", "600/h", "10/90s") → (30, 60): at most that many in any window of
    that many seconds; "0" (or a count of 0) is no limit (None)."""
    value = env.str(name, default=default).strip()
    if value == "0":
        return None
    count, _, period = value.partition("/")
    match = re.fullmatch(r"(\d*)\s*(s|min|h)", period.strip())
    try:
        count = int(count)
    except ValueError:
        match = None
    if match is None or count < 0 or match.group(1) == "0":
        raise ImproperlyConfigured(f"{name}: {value!r} is not a rate such as 30/min, 5/s, 600/h or 10/90s")
    seconds = int(match.group(1) or 1) * {"s": 1, "min": 60, "h": 3600}[match.group(2)]
    return (count, seconds) if count else None


# Fair use (`judging.pressure`, `judging.rates`): what one user may have queued and send, so
# that one account cannot lock a pool for everyone. A user's active practice jobs in a pool
# beyond which their practice submits there are refused (0: no limit); the practice
# submissions one user may send in a window; an exam participant's active exam jobs in a pool
# beyond which their exam submits are refused (also the spacing of their jobs in the exam
# queue, `judging.priority`); the exam submissions one participant may send in a window.
KECE_USER_ACTIVE_MAX = _count("KECE_USER_ACTIVE_MAX", 20, minimum=0)
KECE_USER_SUBMIT_RATE = _rate("KECE_USER_SUBMIT_RATE", "30/min")
KECE_EXAM_ACTIVE_MAX = _count("KECE_EXAM_ACTIVE_MAX", 10, minimum=1)
KECE_EXAM_SUBMIT_RATE = _rate("KECE_EXAM_SUBMIT_RATE", "20/min")

# Bulk rejudges (`judging.services.bulk_rejudge`): how often the step runs, and how many of
# one operation's jobs it keeps queued at a time.
KECE_REJUDGE_INTERVAL_MS = _positive_ms("KECE_REJUDGE_INTERVAL_MS", 2000)
# Reconciliation (`judging.services.reconcile`): how often the periodic work checks the
# design's gates and repairs what is safe (a day; the console shows the last report).
KECE_RECONCILE_INTERVAL_MS = _positive_ms("KECE_RECONCILE_INTERVAL_MS", 86_400_000)
# One clock (`judging.clock`): how often a process compares its clock with the database's, and
# how far apart they may be before it refuses the node calls that set or check a deadline and
# its reaper stops (a few seconds: NTP keeps hosts within milliseconds, and a lease is 60 s).
KECE_CLOCK_CHECK_MS = _positive_ms("KECE_CLOCK_CHECK_MS", 10_000)
# Lesson statistics (`judging.statistics`): how long a lesson's leaderboard, daily counts and
# progress are served from the cache before they are computed again.
KECE_STATS_CACHE_S = env.int("KECE_STATS_CACHE_S", default=60)
if KECE_STATS_CACHE_S < 1:
    raise ImproperlyConfigured("KECE_STATS_CACHE_S must be at least 1")
KECE_CLOCK_SKEW_MAX_MS = _positive_ms("KECE_CLOCK_SKEW_MAX_MS", 5_000)
# Capacity advice (`judging.capacity`): the recent window the arrival rate and judge time are
# measured over, how long that measure is served from the cache, the share of ready slots the
# advice lets be busy on average, and the exam burst's defaults (an ACM participant's
# submissions per problem; the seconds the burst should be judged within).
KECE_CAPACITY_WINDOW_S = _count("KECE_CAPACITY_WINDOW_S", 3600, minimum=60)
KECE_CAPACITY_CACHE_S = _count("KECE_CAPACITY_CACHE_S", 60, minimum=1)


def _positive_number(name: str, default: float, *, maximum: float) -> float:
    try:
        value = env.float(name, default=default)
    except ValueError:
        value = None
    if value is None or not 0 < value <= maximum:
        raise ImproperlyConfigured(f"{name} must be a number above 0 and at most {maximum:g}")
    return value


KECE_CAPACITY_UTILISATION = _positive_number("KECE_CAPACITY_UTILISATION", 0.8, maximum=1)
KECE_EXAM_SUBMISSIONS_PER_PROBLEM = _positive_number("KECE_EXAM_SUBMISSIONS_PER_PROBLEM", 3.0, maximum=1000)
KECE_EXAM_BURST_TARGET_S = _count("KECE_EXAM_BURST_TARGET_S", 60, minimum=1)
KECE_REJUDGE_BATCH = env.int("KECE_REJUDGE_BATCH", default=50)
if KECE_REJUDGE_BATCH < 1:
    raise ImproperlyConfigured("KECE_REJUDGE_BATCH must be at least 1")

# Quarantine by what a node does (`nodes.quarantine`): INFRA_ERROR results on this many
# different jobs in a row; free slots but no claim for this long while its pool had due
# work; this many renew batches in a row in which every lease came back lost.
KECE_QUARANTINE_INFRA_ERRORS = env.int("KECE_QUARANTINE_INFRA_ERRORS", default=3)
KECE_QUARANTINE_STALL_MS = _positive_ms("KECE_QUARANTINE_STALL_MS", 60000)
KECE_QUARANTINE_RENEW_LOST = env.int("KECE_QUARANTINE_RENEW_LOST", default=3)
if KECE_QUARANTINE_INFRA_ERRORS < 1 or KECE_QUARANTINE_RENEW_LOST < 1:
    raise ImproperlyConfigured("KECE_QUARANTINE_INFRA_ERRORS and KECE_QUARANTINE_RENEW_LOST must be at least 1")

# Integrity of the nodes' verdicts (`nodes.canaries_hidden`, `nodes.cross_checks`): a canary
# program hidden among a node's judge jobs, about 1 in KECE_CANARY_RATE of the jobs it claims
# and at least one every KECE_CANARY_MIN_INTERVAL_S while it judges; about 1 in
# KECE_CROSS_CHECK_RATE settled judge jobs judged again on another node of the pool, a node
# quarantined after KECE_CROSS_CHECK_QUARANTINE_AFTER disagreements with its peers. 0 disables
# the first three.
def _not_negative(name: str, default: int) -> int:
    try:
        value = env.int(name, default=default)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a whole number: {exc}") from exc
    if value < 0:
        raise ImproperlyConfigured(f"{name} must be 0 (off) or more, got {value}")
    return value


# After SIGTERM a web process answers /readyz 503 and goes on serving until no long poll
# waits in it, for at most this long (`kece.health.drain_on_sigterm`): by default the
# longest claim wait, so the long polls already waiting get their answer. 0: stop at once.
KECE_DRAIN_MS = _not_negative("KECE_DRAIN_MS", KECE_CLAIM_WAIT_MS)

KECE_CANARY_RATE = _not_negative("KECE_CANARY_RATE", 200)
KECE_CANARY_MIN_INTERVAL_S = _not_negative("KECE_CANARY_MIN_INTERVAL_S", 3600)
KECE_CROSS_CHECK_RATE = _not_negative("KECE_CROSS_CHECK_RATE", 100)
KECE_CROSS_CHECK_QUARANTINE_AFTER = _not_negative("KECE_CROSS_CHECK_QUARANTINE_AFTER", 3)
if KECE_CROSS_CHECK_QUARANTINE_AFTER < 1:
    raise ImproperlyConfigured("KECE_CROSS_CHECK_QUARANTINE_AFTER must be at least 1")


def _kept_for(name: str, default: int) -> int:
    """A retention age: 0 or empty keeps forever."""
    return _not_negative(name, default) if env.str(name, default=str(default)).strip() else 0


# Retention (`judging.services.retention`): how often the periodic work prunes, in batches of
# KECE_GC_BATCH rows (each its own short transaction) and at most KECE_GC_BATCHES batches of
# each kind per run; how many days finished jobs keep their details, delivered outbox events
# and audit rows; how many hours a stored file no manifest or active job names is kept.
KECE_GC_INTERVAL_MS = _positive_ms("KECE_GC_INTERVAL_MS", 3_600_000)
KECE_GC_BATCH = _count("KECE_GC_BATCH", 200, minimum=1)
KECE_GC_BATCHES = _count("KECE_GC_BATCHES", 10, minimum=1)
KECE_GC_JOB_DETAILS_DAYS = _kept_for("KECE_GC_JOB_DETAILS_DAYS", 90)
KECE_GC_EVENTS_DAYS = _kept_for("KECE_GC_EVENTS_DAYS", 30)
KECE_GC_AUDIT_DAYS = _kept_for("KECE_GC_AUDIT_DAYS", 365)
KECE_GC_BLOB_GRACE_HOURS = _kept_for("KECE_GC_BLOB_GRACE_HOURS", 24)

# Out-of-order row locks raise instead of logging. Always on in tests (tests/settings.py).
KECE_LOCK_ORDER_CHECK = env.bool("KECE_LOCK_ORDER_CHECK", default=DEBUG)

_default_networks = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"]
if DEBUG:
    _default_networks += ["127.0.0.0/8", "::1/128"]
KECE_PROBE_ALLOWED_NETWORKS = env.list("KECE_PROBE_ALLOWED_NETWORKS", default=_default_networks)
for _network in KECE_PROBE_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError as exc:
        raise ImproperlyConfigured(f"KECE_PROBE_ALLOWED_NETWORKS: {_network!r} is not a network") from exc


def _port_ranges(items) -> list[tuple[int, int]]:
    """"443,8443,9000-9100" → [(443, 443), (8443, 8443), (9000, 9100)]."""
    ranges = []
    for item in items:
        low, _, high = item.strip().partition("-")
        try:
            pair = (int(low), int(high or low))
        except ValueError as exc:
            raise ImproperlyConfigured(f"KECE_PROBE_ALLOWED_PORTS: {item!r} is not a port or a range") from exc
        if not 1 <= pair[0] <= pair[1] <= 65535:
            raise ImproperlyConfigured(f"KECE_PROBE_ALLOWED_PORTS: {item!r} is out of range")
        ranges.append(pair)
    return ranges


KECE_PROBE_ALLOWED_PORTS = _port_ranges(env.list("KECE_PROBE_ALLOWED_PORTS", default=["443", "8443"]))
# One deadline for a connectivity probe, from resolving the name to the last byte of the answer.
KECE_PROBE_TIMEOUT_MS = _positive_ms("KECE_PROBE_TIMEOUT_MS", 10000)
# CA bundle that signs the nodes' health-endpoint certificates (default: the system's).
KECE_PROBE_CA_FILE = env.str("KECE_PROBE_CA_FILE", default="")
# Where agents reach the node API (the internal listener), for the console's command that
# starts one: the site's own address when unset (the embedded default serves both).
KECE_NODE_API_URL = env.str("KECE_NODE_API_URL", default="").strip().rstrip("/")
if KECE_NODE_API_URL and not re.fullmatch(r"https?://[^/?#\s]+", KECE_NODE_API_URL):
    raise ImproperlyConfigured(f"KECE_NODE_API_URL must be an origin such as https://kece-internal:8443, "
                               f"got {KECE_NODE_API_URL!r}")
# A self-check the node has not finished by then fails.
KECE_SELF_CHECK_TIMEOUT_MS = _positive_ms("KECE_SELF_CHECK_TIMEOUT_MS", 360000)
# Accept nodes whose agent runs user code in the weak (rlimit-only) sandbox. Development only.
KECE_ALLOW_WEAK_SANDBOX = env.bool("KECE_ALLOW_WEAK_SANDBOX", default=False)

# --- logging: one JSON object per line (`kece.logging`), secrets redacted ---------------------

LOG_LEVEL = env.str("KECE_LOG_LEVEL", default="INFO")
LOG_FORMAT = env.str("KECE_LOG_FORMAT", default="json")
if LOG_FORMAT not in ("json", "text"):
    raise ImproperlyConfigured(f"KECE_LOG_FORMAT must be json or text, got {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"line": {"()": {"json": "kece.logging.JsonFormatter", "text": "kece.logging.TextFormatter"}[LOG_FORMAT]}},
    "filters": {"request": {"()": "kece.logging.RequestIdFilter"}, "redact": {"()": "kece.logging.RedactingFilter"},
                "readiness": {"()": "kece.logging.ReadinessAnswerFilter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "line", "filters": ["request", "redact"]}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Django's own loggers go through the one formatter; refused requests (401, 409 …)
        # are normal protocol answers, so only server errors are logged per request.
        "django": {"handlers": ["console"], "level": LOG_LEVEL, "propagate": False},
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False, "filters": ["readiness"]},
        "django.db.backends": {"level": "INFO"},
        "kece": {"level": LOG_LEVEL},
        # uvicorn's own loggers (start, stop, access) are `kece.serve`'s log config's, set
        # before the application loads; named here they would undo `--no-access-log`.
        # Every task's "received", "succeeded" and beat's "sending due task": about 400 lines
        # a minute from an idle worker (its periodic steps run every few seconds), which would
        # rotate a night's warnings and the daily reconciliation out of the kept logs. A
        # failing task is still logged, at ERROR.
        **{name: {"level": "WARNING"} for name in ("celery.app.trace", "celery.worker.strategy", "celery.beat")},
        # A request for a host not in ALLOWED_HOSTS (a scanner at the address) is answered
        # 400; its traceback at ERROR would drown the errors that matter.
        "django.security.DisallowedHost": {"handlers": [], "propagate": False},
        # django-axes says its version at every process start; its refusals (WARNING) stay.
        "axes.apps": {"level": "WARNING"},
    },
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "kece.tokens.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "kece.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "NUM_PROXIES": KECE_NUM_PROXIES,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "KECE judge control plane",
    "DESCRIPTION": "Node API, admin API and user API of the KECE judge control plane (contract version 1).",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # What drf-spectacular would estimate from every operation; fixed, so that the partial
    # schemas of `kece.views.SchemaView` give an operation the same id as the whole one.
    "SCHEMA_PATH_PREFIX": "/api",
    "ENUM_NAME_OVERRIDES": {
        "DesiredStateEnum": ["PENDING_VERIFICATION", "ENABLED", "DRAINING", "DISABLED"],
        "SettableDesiredStateEnum": ["ENABLED", "DRAINING", "DISABLED"],
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "kece.schema.add_contract_parts",
    ],
}
