#!/usr/bin/env bash
# Install the database server the real-server tests start (tests/test_servers.py, marker `servers`):
# PostgreSQL from Debian's packages (`apt-get install postgresql`), when its binaries are missing
# and this runs as root (CI runs as root on a fresh machine). Idempotent and quick when installed.
# The other servers come with the Python install: `ray start` (ray) and `mlflow server` (mlflow);
# the PostgreSQL driver is the `cluster` extra (psycopg). Nothing is started here: each test starts
# its own server on 127.0.0.1 on a free port and stops it. A machine where this cannot install
# PostgreSQL (not root, no apt-get, no registry) runs the other tests; those tests skip, saying why.
set -uo pipefail

if compgen -G "/usr/lib/postgresql/*/bin/postgres" > /dev/null || command -v postgres > /dev/null; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get > /dev/null; then
    echo "install_servers: PostgreSQL is not installed and this is not root with apt-get: the PostgreSQL tests will skip" >&2
    exit 0
fi
start=$(date +%s)
# Debian's post-install would start the system cluster (port 5432) through invoke-rc.d; the tests
# start their own server, so no service is started here (policy-rc.d "101": action forbidden).
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && made_policy=1
fi
export DEBIAN_FRONTEND=noninteractive
ok=0
# Bounded: a machine without a reachable package mirror must not hang the test run (apt's own
# retries can take many minutes); the tests then skip, saying why.
if timeout 120 apt-get update -qq > /dev/null 2>&1 \
        && timeout 600 apt-get install -y -qq --no-install-recommends postgresql > /dev/null 2>&1; then
    ok=1
fi
[ "$made_policy" = 1 ] && rm -f "$policy"
if [ "$ok" = 1 ]; then
    echo "install_servers: installed PostgreSQL ($(ls /usr/lib/postgresql 2>/dev/null | tr '\n' ' ')) in $(( $(date +%s) - start )) s"
else
    echo "install_servers: apt-get could not install postgresql (no mirror, or timed out): the PostgreSQL tests will skip" >&2
fi
exit 0
