#!/bin/sh
# Sets a judge machine up to run one KECE node agent as a systemd service,
# kece-agent@INSTANCE (deploy/README.md, "Judge machines"). Run it as root on the judge
# host, from a checkout of this repository; run it again for each pool the host serves.
#
#   install.sh [--dry-run] [--instance NAME] [--port PORT] [--join-code CODE] [--start] POOL
#
#   POOL              cpp | java | python | mysql | arkts
#   --instance NAME   the unit's instance (default: POOL); a second agent of the same pool
#                     on this host needs its own, e.g. --instance cpp2
#   --port PORT       the agent's health endpoint port (default 8443; distinct per instance)
#   --join-code CODE  write the node's one-time join code (from the console) into its
#                     credential file, unless the file already holds something
#   --start           start the service now (otherwise: enabled, started at the next boot
#                     or by `systemctl start kece-agent@INSTANCE` once the settings are in place)
#   --dry-run         print what would be done, and do nothing
#
# What it does: installs bubblewrap, prlimit and the pool's toolchain (Debian packages, as
# deploy/compose/Dockerfile.agent does); creates the system user kece-agent; installs the
# agent's code in /opt/kece-agent with a virtualenv of its pinned requirements; installs
# the unit; writes /etc/kece-agent/INSTANCE.env from kece-agent.env.example (never
# overwriting it); makes the credential and workspace folders; enables the instance.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
prefix=/opt/kece-agent
confdir=/etc/kece-agent
statedir=/var/lib/kece-agent
unitdir=/etc/systemd/system
user=kece-agent

dry_run=0 instance= port=8443 join_code= start=0 pool=
usage() { sed -n '6,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
while [ "$#" -gt 0 ]; do
    case "$1" in
        --dry-run) dry_run=1 ;;
        --instance) instance=${2:?--instance needs a name}; shift ;;
        --port) port=${2:?--port needs a number}; shift ;;
        --join-code) join_code=${2:?--join-code needs the code}; shift ;;
        --start) start=1 ;;
        -h|--help) usage 0 ;;
        -*) echo "install.sh: unknown option $1" >&2; usage ;;
        *) [ -z "$pool" ] || usage; pool=$1 ;;
    esac
    shift
done
case "$pool" in
    cpp) packages="g++" ;;
    java) packages="openjdk-17-jdk-headless" ;;
    python) packages="python3" ;;
    arkts) packages="nodejs npm" ;;
    mysql) packages="libmariadb3 pkg-config libmariadb-dev build-essential python3-dev" ;;
    *) echo "install.sh: POOL must be cpp, java, python, mysql or arkts (got '$pool')" >&2; usage ;;
esac
instance=${instance:-$pool}
case "$instance" in
    *[!a-z0-9-]*|"") echo "install.sh: the instance name takes a-z, 0-9 and '-' only" >&2; exit 2 ;;
esac
case "$port" in
    *[!0-9]*|"") echo "install.sh: --port takes a number" >&2; exit 2 ;;
esac

# run CMD...: do it, or only say it.
run() {
    if [ "$dry_run" = 1 ]; then
        printf '+'
        printf ' %s' "$@"
        printf '\n'
    else
        "$@"
    fi
}

# write FILE MODE: FILE (created with MODE) gets standard input, unless FILE exists and holds
# something (an emptied credential file is how a node is re-registered: deploy/README.md).
write() {
    if [ -s "$1" ]; then
        echo "install.sh: keeping $1" >&2
        cat > /dev/null
        return 0
    fi
    if [ "$dry_run" = 1 ]; then
        echo "+ write $1 (mode $2):"
        sed 's/^/    /'
    else
        (umask 077; cat > "$1.tmp")
        chmod "$2" "$1.tmp"
        mv "$1.tmp" "$1"
    fi
}

if [ "$dry_run" = 0 ] && [ "$(id -u)" -ne 0 ]; then
    echo "install.sh: run it as root (or with --dry-run)" >&2
    exit 2
fi

# 1. The sandbox (bubblewrap, prlimit) and the pool's toolchain.
run apt-get update -qq
# shellcheck disable=SC2086 # one word per package
run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    bubblewrap libseccomp2 util-linux ca-certificates python3 python3-venv $packages
if [ "$pool" = arkts ]; then
    run npm install --global --no-fund --no-audit typescript@5.9.3
fi

# 2. The service user: the mysql pool's agent runs as it (it starts no sandbox).
if ! getent passwd "$user" > /dev/null; then
    run useradd --system --user-group --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin "$user"
fi

# The agent (and the reading of its pins here) needs Python 3.11: Debian 12, Ubuntu 24.04 or newer.
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "install.sh: the agent needs Python 3.11 or newer; this machine's python3 is" \
        "$(python3 --version 2>&1)" >&2
    exit 2
fi

# 3. The agent's code outside /usr (the sandbox sees /usr), and its virtualenv.
run install -d -m 0755 "$prefix"
run rm -rf "$prefix/node_agent"
run cp -R "$repo/node_agent" "$prefix/node_agent"
run find "$prefix/node_agent" -name __pycache__ -prune -exec rm -rf {} +
[ -x "$prefix/venv/bin/python" ] || run python3 -m venv "$prefix/venv"
requirements=$(python3 "$repo/deploy/compose/agent-requirements.py" "$pool" "$repo/pyproject.toml")
# shellcheck disable=SC2086 # one word per requirement
run "$prefix/venv/bin/pip" install --quiet --disable-pip-version-check $requirements
run "$prefix/venv/bin/python" -m compileall -q "$prefix/node_agent"

# 4. The unit, and the instance's settings.
run install -m 0644 "$here/kece-agent@.service" "$unitdir/kece-agent@.service"
run install -d -m 0755 "$confdir"
sed -e "s/@POOL@/$pool/g" -e "s/@INSTANCE@/$instance/g" -e "s/@PORT@/$port/g" \
    "$here/kece-agent.env.example" | write "$confdir/$instance.env" 0640
if [ "$pool" = mysql ]; then
    run install -d -m 0755 "$unitdir/kece-agent@$instance.service.d"
    write "$unitdir/kece-agent@$instance.service.d/10-unprivileged.conf" 0644 <<CONF
# The mysql pool judges on its judge MySQL and starts no sandbox: no root, no capability.
[Service]
User=$user
Group=$user
CapabilityBoundingSet=
CONF
fi

# 5. Its state: the credential folder is the agent's alone; the workspace must be reachable
#    (o+x) by the sandbox uid.
owner=root
[ "$pool" = mysql ] && owner=$user
run install -d -m 0711 "$statedir" "$statedir/$instance"
run install -d -m 0700 -o "$owner" -g "$owner" "$statedir/$instance/credential"
run install -d -m 0711 -o "$owner" -g "$owner" "$statedir/$instance/workspace"
credential="$statedir/$instance/credential/credential"
if [ -n "$join_code" ]; then
    if [ -s "$credential" ]; then
        echo "install.sh: $credential already holds a join code or credential; left as it is" >&2
    else
        printf '%s\n' "$join_code" | write "$credential" 0600
        run chown "$owner:$owner" "$credential"
    fi
fi

# 6. Enable (and perhaps start) the instance.
run systemctl daemon-reload
run systemctl enable "kece-agent@$instance.service"
if [ "$start" = 1 ]; then
    run systemctl restart "kece-agent@$instance.service"
fi

cat <<NEXT
install.sh: kece-agent@$instance is installed and enabled. Next:
  1. edit $confdir/$instance.env (control URL, slots) and put the TLS files it names in place;
  2. register the node in the console (pool $pool, base URL https://<this host>:$port) and
     write its join code: install.sh --join-code CODE --instance $instance $pool
     (or into $credential, alone on one line, mode 0600);
  3. systemctl start kece-agent@$instance; journalctl -u kece-agent@$instance -f
NEXT
