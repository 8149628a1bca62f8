"""Agent configuration from the environment.

Every problem is reported as one :class:`ConfigError` with a sentence an operator can act
on; ``__main__`` prints it and exits with code 2, never with a traceback.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import ssl
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from . import POOLS
from .runtimes import RuntimeSpec, SpecError, load_specs


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class MysqlTarget:
    host: str
    port: int
    user: str
    password: str


@dataclass(frozen=True)
class Config:
    pool: str
    control_url: str
    credential_file: Path
    local_slots: int
    workspace: Path
    health_listen: tuple[str, int] | None
    tls_cert: Path | None
    tls_key: Path | None
    metrics_token: str | None
    ca_file: Path | None
    mysql: MysqlTarget | None
    spec: RuntimeSpec
    allow_weak_sandbox: bool
    bwrap: str | None
    # JUDGE_BWRAP as given when it names nothing that runs here (a typo): never the weak
    # sandbox's way in, which only JUDGE_BWRAP=off or no bubblewrap installed is.
    bwrap_not_found: str | None
    sandbox_uid: int | None
    sandbox_gid: int | None
    stop_grace_ms: int
    job_max_ms: int
    cache_max_mb: int
    cache_low_mb: int
    download_threads: int
    sql_sweep_ms: int
    claim_jitter_ms: int
    log_level: str
    log_format: str
    control_url_is_plain_http: bool

    @property
    def runtime_spec(self) -> str:
        return self.spec.id


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


def _flag(env: dict[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigError(f"{name} must be 1 or 0, got {raw!r}")


def _int(env: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _required(env: dict[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ConfigError(f"{name} is required")
    return value


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_control_url(raw: str) -> tuple[str, bool]:
    """Return (origin without trailing slash, is plain http)."""
    try:
        parts = urlsplit(raw)
        port = parts.port  # raises on a bad port
    except ValueError:
        raise ConfigError(f"JUDGE_CONTROL_URL is not a valid URL: {raw!r}") from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ConfigError("JUDGE_CONTROL_URL must be https://host[:port] (the server origin)")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ConfigError("JUDGE_CONTROL_URL must be the server origin only, without path, query or user")
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        raise ConfigError("JUDGE_CONTROL_URL may use plain http:// only for a loopback address; use https://")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    origin = f"{parts.scheme}://{host}" + (f":{port}" if port else "")
    return origin, parts.scheme == "http"


def parse_listen(raw: str) -> tuple[str, int]:
    host, sep, port_text = raw.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"JUDGE_HEALTH_LISTEN must be host:port, got {raw!r}")
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"JUDGE_HEALTH_LISTEN port is not a number: {raw!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"JUDGE_HEALTH_LISTEN port out of range: {raw!r}")
    return host, port


def parse_mysql_url(raw: str) -> MysqlTarget:
    parts = urlsplit(raw)
    if parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
        raise ConfigError("JUDGE_MYSQL_URL must look like mysql://user:password@host:port/")
    try:
        port = parts.port or 3306
    except ValueError:
        raise ConfigError("JUDGE_MYSQL_URL has a bad port") from None
    return MysqlTarget(
        host=parts.hostname,
        port=port,
        user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""),
    )


def _readable_file(env: dict[str, str], name: str) -> Path | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    path = Path(raw)
    if not path.is_file() or not os.access(path, os.R_OK):
        raise ConfigError(f"{name} points to {raw}, which is not a readable file")
    return path


def _ca_bundle(env: dict[str, str]) -> Path | None:
    """JUDGE_CA_FILE, which must hold at least one certificate: a key or an empty file
    there made every call fail verification, retried for ever as "unreachable"."""
    path = _readable_file(env, "JUDGE_CA_FILE")
    if path is not None:
        try:
            ssl.create_default_context(cafile=str(path))
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(f"JUDGE_CA_FILE ({path}) holds no CA certificate the agent can use: {exc}") from None
    return path


def _log_format(env: dict[str, str]) -> str:
    fmt = env.get("JUDGE_LOG_FORMAT", "").strip().lower() or "json"
    if fmt not in ("json", "text"):
        raise ConfigError(f"JUDGE_LOG_FORMAT must be json or text, got {fmt!r}")
    return fmt


def _log_level(env: dict[str, str]) -> str:
    level = env.get("JUDGE_LOG_LEVEL", "").strip().upper() or "INFO"
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"JUDGE_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR, got {level!r}")
    return level


def load(env: dict[str, str]) -> Config:
    mode = env.get("JUDGE_MODE", "").strip()
    if mode != "pool":
        raise ConfigError("JUDGE_MODE must be 'pool' (one agent process serves one pool)")
    pool = _required(env, "JUDGE_POOL")
    if pool not in POOLS:
        raise ConfigError(f"JUDGE_POOL must be one of {', '.join(POOLS)}; got {pool!r}")
    control_url, plain_http = parse_control_url(_required(env, "JUDGE_CONTROL_URL"))

    credential_file = Path(_required(env, "JUDGE_CREDENTIAL_FILE"))
    if not credential_file.is_file():
        raise ConfigError(f"JUDGE_CREDENTIAL_FILE {credential_file} does not exist (put the join code in it)")
    if not os.access(credential_file, os.R_OK | os.W_OK) or not os.access(credential_file.parent, os.W_OK):
        raise ConfigError(
            f"JUDGE_CREDENTIAL_FILE {credential_file} and its folder must be writable by the agent "
            "(the join code is replaced by the credential)"
        )

    workspace = Path(_required(env, "JUDGE_WORKSPACE"))
    try:
        workspace.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"JUDGE_WORKSPACE {workspace} cannot be created: {exc.strerror}") from None
    if not os.access(workspace, os.W_OK | os.X_OK):
        raise ConfigError(f"JUDGE_WORKSPACE {workspace} is not writable")
    workspace = workspace.resolve()
    if credential_file.resolve().is_relative_to(workspace):
        raise ConfigError("JUDGE_CREDENTIAL_FILE must live outside JUDGE_WORKSPACE")

    if "JUDGE_HEALTH_LISTEN" not in env:
        raise ConfigError(
            "JUDGE_HEALTH_LISTEN is required (host:port of the HTTPS health endpoint); "
            "set it to 'off' to run without one in development"
        )
    listen_raw = env["JUDGE_HEALTH_LISTEN"].strip()
    health_listen = None if listen_raw.lower() in ("", "off") else parse_listen(listen_raw)
    tls_cert = _readable_file(env, "JUDGE_TLS_CERT")
    tls_key = _readable_file(env, "JUDGE_TLS_KEY")
    if health_listen and not (tls_cert and tls_key):
        raise ConfigError("JUDGE_TLS_CERT and JUDGE_TLS_KEY are required while the health endpoint is on")
    metrics_token = env.get("JUDGE_METRICS_TOKEN", "").strip() or None
    if metrics_token is not None and (len(metrics_token) < 16 or not metrics_token.isprintable()
                                      or " " in metrics_token):
        raise ConfigError("JUDGE_METRICS_TOKEN must be at least 16 printable characters without spaces")

    mysql = None
    if pool == "mysql":
        mysql = parse_mysql_url(_required(env, "JUDGE_MYSQL_URL"))

    spec_file = _readable_file(env, "JUDGE_RUNTIME_SPEC_FILE")
    spec_id = env.get("JUDGE_RUNTIME_SPEC", "").strip() or f"{pool}-r1"
    try:
        specs = load_specs(spec_file)
    except SpecError as exc:
        raise ConfigError(f"JUDGE_RUNTIME_SPEC_FILE: {exc}") from None
    spec = specs.get(spec_id)
    if spec is None:
        raise ConfigError(f"runtime spec {spec_id!r} is unknown (known: {', '.join(sorted(specs))})")
    if spec.pool != pool:
        raise ConfigError(f"runtime spec {spec_id!r} belongs to pool {spec.pool!r}, not {pool!r}")

    allow_weak = _flag(env, "JUDGE_ALLOW_WEAK_SANDBOX")
    named = env.get("JUDGE_BWRAP", "").strip()
    bwrap_raw = named or "bwrap"
    # "off" chooses the weak sandbox on purpose; a bwrap that is there but fails never does.
    bwrap = None if bwrap_raw.lower() == "off" else shutil.which(bwrap_raw)
    bwrap_not_found = named if named and named.lower() != "off" and bwrap is None else None

    is_root = os.geteuid() == 0
    sandbox_uid = _int(env, "JUDGE_SANDBOX_UID", 65534, 1, 2**31 - 1) if is_root else None
    sandbox_gid = _int(env, "JUDGE_SANDBOX_GID", 65534, 1, 2**31 - 1) if is_root else None

    cache_max_mb = _int(env, "JUDGE_CACHE_MAX_MB", 2048, 16, 1 << 22)
    cache_low_mb = _int(env, "JUDGE_CACHE_LOW_MB", cache_max_mb * 3 // 4, 0, 1 << 22)
    if cache_low_mb > cache_max_mb:
        raise ConfigError(f"JUDGE_CACHE_LOW_MB ({cache_low_mb}) must not exceed JUDGE_CACHE_MAX_MB ({cache_max_mb})")

    return Config(
        pool=pool,
        control_url=control_url,
        credential_file=credential_file.resolve(),
        local_slots=_int(env, "JUDGE_LOCAL_SLOTS", 1, 1, 64),
        workspace=workspace,
        health_listen=health_listen,
        tls_cert=tls_cert,
        tls_key=tls_key,
        metrics_token=metrics_token,
        ca_file=_ca_bundle(env),
        mysql=mysql,
        spec=spec,
        allow_weak_sandbox=allow_weak,
        bwrap=bwrap,
        bwrap_not_found=bwrap_not_found,
        sandbox_uid=sandbox_uid,
        sandbox_gid=sandbox_gid,
        stop_grace_ms=_int(env, "JUDGE_STOP_GRACE_MS", 30000, 0, 3_600_000),
        job_max_ms=_int(env, "JUDGE_JOB_MAX_MS", 900_000, 10_000, 24 * 3_600_000),
        cache_max_mb=cache_max_mb,
        cache_low_mb=cache_low_mb,
        download_threads=_int(env, "JUDGE_DOWNLOAD_THREADS", 4, 1, 16),
        sql_sweep_ms=_int(env, "JUDGE_SQL_SWEEP_MS", 300_000, 1000, 24 * 3_600_000),
        claim_jitter_ms=_int(env, "JUDGE_CLAIM_JITTER_MS", 500, 0, 60_000),
        log_level=_log_level(env),
        log_format=_log_format(env),
        control_url_is_plain_http=plain_http,
    )
