#!/bin/sh
# Creates the files compose.yaml mounts as secrets, for a first start.
#
#   secrets/  the Django secret key, random MySQL passwords and the connection URLs that
#             carry them (control-plane MySQL, judge MySQL)
#   certs/    a private internal CA (internal-ca.pem; its key internal-ca.key is never
#             mounted anywhere), and certificates it signs for the proxy's internal
#             listener (kece-internal) and for each agent's health endpoint (agent-<pool>);
#             a self-signed public certificate for DOMAIN, unless certs/public.pem exists
#
# Nothing that exists is overwritten: run it again after adding a pool, or replace
# certs/public.pem and certs/public.key with a real certificate (full chain) and its key.
#
# Usage: ./make-secrets.sh DOMAIN
#   DOMAIN            the public host name (the same as KECE_DOMAIN in .env)
#   KECE_SECRETS_DIR  where secrets go (default: secrets/ beside this script)
#   KECE_CERTS_DIR    where certificates go (default: certs/ beside this script)
#   KECE_POOLS        agent names to certify (default: cpp java python mysql arkts)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
domain=${1:-${KECE_DOMAIN:-}}
if [ -z "$domain" ]; then
    echo "usage: $0 DOMAIN   (the public host name, e.g. judge.example.org)" >&2
    exit 2
fi
secrets=${KECE_SECRETS_DIR:-$here/secrets}
certs=${KECE_CERTS_DIR:-$here/certs}
pools=${KECE_POOLS:-cpp java python mysql arkts}
command -v openssl >/dev/null 2>&1 || { echo "make-secrets: openssl is required" >&2; exit 2; }

# The folders keep other users of this host out. The files inside are world-readable on
# purpose: each container reads its secrets as its own user (web as 10001, MySQL as 999).
umask 077
mkdir -p "$secrets" "$certs"
chmod 0700 "$secrets" "$certs"

say() { echo "make-secrets: $*"; }

# write FILE CONTENT: create FILE (0644) unless it exists.
write() {
    if [ -e "$1" ]; then
        return 0
    fi
    printf '%s\n' "$2" > "$1.tmp"
    chmod 0644 "$1.tmp"
    mv "$1.tmp" "$1"
    say "wrote $1"
}

random() { openssl rand -hex 24; }
first_line() { head -n 1 "$1"; }

write "$secrets/secret_key" "$(openssl rand -base64 48 | tr -d '\n')"
write "$secrets/mysql_root_password" "$(random)"
write "$secrets/mysql_password" "$(random)"
write "$secrets/judge_mysql_root_password" "$(random)"
# The URLs are built from the passwords above (hex, so nothing needs escaping).
write "$secrets/database_url" "mysql://kece:$(first_line "$secrets/mysql_password")@mysql:3306/kece"
write "$secrets/judge_mysql_url" "mysql://root:$(first_line "$secrets/judge_mysql_root_password")@judge-mysql:3306/"

# --- certificates ----------------------------------------------------------------------
ca="$certs/internal-ca.pem"
ca_key="$certs/internal-ca.key"
if [ ! -e "$ca" ]; then
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$ca_key" -out "$ca" -days 3650 -subj "/CN=KECE internal CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    chmod 0600 "$ca_key"
    chmod 0644 "$ca"
    say "wrote $ca (keep $ca_key private; it is never mounted)"
fi

# leaf NAME: a server certificate for host NAME, signed by the internal CA.
leaf() {
    name=$1
    if [ -e "$certs/$name.pem" ]; then
        return 0
    fi
    if [ ! -e "$ca_key" ]; then
        echo "make-secrets: $ca_key is missing; cannot sign a certificate for $name" >&2
        exit 1
    fi
    ext=$(mktemp)
    csr=$(mktemp)
    cat > "$ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:$name
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid:always
EOF
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$certs/$name.key" -out "$csr" -subj "/CN=$name" 2>/dev/null
    openssl x509 -req -in "$csr" -CA "$ca" -CAkey "$ca_key" -set_serial "0x$(openssl rand -hex 16)" \
        -days 825 -extfile "$ext" -out "$certs/$name.pem" 2>/dev/null
    rm -f "$ext" "$csr"
    chmod 0644 "$certs/$name.pem" "$certs/$name.key"
    say "wrote $certs/$name.pem"
}

leaf kece-internal
for pool in $pools; do
    leaf "agent-$pool"
done

if [ ! -e "$certs/public.pem" ]; then
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$certs/public.key" -out "$certs/public.pem" -days 90 -subj "/CN=$domain" \
        -addext "subjectAltName=DNS:$domain" -addext "extendedKeyUsage=serverAuth" 2>/dev/null
    chmod 0644 "$certs/public.pem" "$certs/public.key"
    say "wrote a SELF-SIGNED $certs/public.pem for $domain: replace it and public.key with a real certificate"
fi
