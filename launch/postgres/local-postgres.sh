#!/usr/bin/env bash
# A private PostgreSQL server on this machine, for testing the run history on PostgreSQL
# (tcpx-analyze history --db postgres://...) without a database server of one's own.
#
#   launch/postgres/local-postgres.sh start    initdb and start it (idempotent); prints nothing on stdout
#   launch/postgres/local-postgres.sh url      the URL of its superuser, password included (a secret: export it, do not print it)
#   launch/postgres/local-postgres.sh status   exit 0 when it answers
#   launch/postgres/local-postgres.sh stop     stop it and remove what start made (idempotent)
#   launch/postgres/local-postgres.sh halt     stop it at once, as a crash would, keeping its data (start brings it back)
#
# Debian's server (apt-get install postgresql; launch/setup.sh --tests installs it), run as the
# user postgres when started by root, else as the caller. Nothing outside the state directory is
# written: its own cluster (data/), socket, log, a random password for the superuser postgres
# (logins over TCP need it: scram-sha-256), and a self-signed certificate (server.crt, for
# localhost and 127.0.0.1) with TLS on where openssl is installed. It listens on 127.0.0.1 only.
# Built for tests, not for keeping data: fsync is off (a crash of the server loses nothing, its
# commits being written at once; one of the machine may). A second login role, tcpx_tls_only, has the same password and may log in
# only over TLS (the tests of TLS where the server asks for it).
#
# Environment: LOCAL_PG_DIR (state directory, default /tmp/tcpx-local-postgres), LOCAL_PG_PORT
# (default 5543), LOCAL_PG_BIN (the server's bin directory, default the newest
# /usr/lib/postgresql/*/bin).
# Exit 77 (with one line saying what is missing) where no server can run here.
set -euo pipefail

DIR=${LOCAL_PG_DIR:-/tmp/tcpx-local-postgres}
PORT=${LOCAL_PG_PORT:-5543}
MARK="$DIR/.made-by-local-postgres"
DATA="$DIR/data"

die() {
  echo "local-postgres.sh: $*" >&2
  exit 1
}
cannot() {
  echo "local-postgres.sh: cannot run PostgreSQL here: $*" >&2
  exit 77
}

bin_dir() {
  if [ -n "${LOCAL_PG_BIN:-}" ]; then
    echo "$LOCAL_PG_BIN"
    return
  fi
  local d
  d=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin 2>/dev/null | sort -V | tail -1)
  echo "$d"
}
BIN=$(bin_dir)

# Runs a server program as the cluster's owner: postgres when we are root.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    (cd "$DIR" && runuser -u postgres -- "$@")
  else
    (cd "$DIR" && "$@")
  fi
}

need_tools() {
  [ -n "$BIN" ] && [ -x "$BIN/initdb" ] && [ -x "$BIN/pg_ctl" ] ||
    cannot "no server programs (initdb, pg_ctl) under /usr/lib/postgresql/*/bin: apt-get install postgresql (or bash launch/setup.sh --tests)"
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || cannot "no user postgres to run the server as (the postgresql package makes it)"
    command -v runuser >/dev/null 2>&1 || cannot "runuser not found (util-linux)"
  fi
  if ! [[ $PORT =~ ^[1-9][0-9]*$ ]] || [ "$PORT" -gt 65535 ]; then
    die "LOCAL_PG_PORT=$PORT: give a free TCP port (1..65535)"
  fi
}

password() { cat "$DIR/password"; }

url() { echo "postgres://postgres:$(password)@127.0.0.1:$PORT/postgres"; }

answers() { as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }

# A self-signed certificate for localhost and 127.0.0.1, and TLS on; nothing without openssl.
tls_setup() {
  command -v openssl >/dev/null 2>&1 || { echo "local-postgres.sh: no openssl: TLS off" >&2; return; }
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -keyout "$DATA/server.key" -out "$DATA/server.crt" >/dev/null 2>&1 || { echo "local-postgres.sh: openssl failed: TLS off" >&2; return; }
  chmod 600 "$DATA/server.key"
  [ "$(id -u)" -ne 0 ] || chown postgres: "$DATA/server.key" "$DATA/server.crt"
  cp "$DATA/server.crt" "$DIR/server.crt"
  chmod 644 "$DIR/server.crt"
  echo "ssl = on" >>"$DATA/postgresql.conf"
  # The TLS-only role may not log in without TLS (the first matching line decides).
  { echo "hostnossl all tcpx_tls_only 127.0.0.1/32 reject"; cat "$DATA/pg_hba.conf"; } >"$DIR/hba" &&
    cat "$DIR/hba" >"$DATA/pg_hba.conf" && rm -f "$DIR/hba"
}

init() {
  umask 077
  head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$DIR/password"
  umask 022
  [ "$(id -u)" -ne 0 ] || chown postgres: "$DIR"
  # The password reaches initdb through a file only the owner reads, removed at once.
  install -m 600 "$DIR/password" "$DIR/pwfile"
  [ "$(id -u)" -ne 0 ] || chown postgres: "$DIR/pwfile"
  as_owner "$BIN/initdb" -D "$DATA" -U postgres --pwfile="$DIR/pwfile" -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 --no-sync >"$DIR/initdb.log" 2>&1 ||
    { rm -f "$DIR/pwfile"; die "initdb failed: $(tail -3 "$DIR/initdb.log")"; }
  rm -f "$DIR/pwfile"
  mkdir -p "$DIR/socket"
  [ "$(id -u)" -ne 0 ] || chown postgres: "$DIR/socket"
  cat >>"$DATA/postgresql.conf" <<CONF
# Written by launch/postgres/local-postgres.sh: a throwaway server for tests.
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DIR/socket'
max_connections = 60
fsync = off
full_page_writes = off
CONF
  tls_setup
}

start() {
  need_tools
  if [ -d "$DIR" ] && [ ! -f "$MARK" ]; then
    die "$DIR exists and was not made by local-postgres.sh: set LOCAL_PG_DIR to a new directory"
  fi
  mkdir -p "$DIR"
  chmod 755 "$DIR"
  touch "$MARK"
  [ -f "$DATA/PG_VERSION" ] || init
  if ! answers; then
    # -w -t: wait for it to accept connections, at most 30 s.
    as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DIR/server.log" -w -t 30 start >/dev/null ||
      die "the server did not start: $(tail -5 "$DIR/server.log" 2>/dev/null)"
  fi
  # The TLS-only role (again on every start: idempotent).
  as_owner "$BIN/psql" -h "$DIR/socket" -p "$PORT" -U postgres -d postgres -qAt -v ON_ERROR_STOP=1 >/dev/null <<SQL ||
SELECT 'CREATE ROLE tcpx_tls_only LOGIN SUPERUSER' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tcpx_tls_only') \gexec
ALTER ROLE tcpx_tls_only PASSWORD '$(password)';
SQL
    die "could not set up role tcpx_tls_only: see $DIR/server.log"
  echo "local-postgres.sh: up: $("$BIN/postgres" --version) on 127.0.0.1:$PORT, TLS $(grep -q '^ssl = on' "$DATA/postgresql.conf" && echo on || echo off), state in $DIR" >&2
}

stop() {
  [ -d "$DIR" ] || { echo "local-postgres.sh: stop: nothing to do ($DIR does not exist)" >&2; return; }
  [ -f "$MARK" ] || die "$DIR was not made by local-postgres.sh: not touching it"
  if [ -n "$BIN" ] && [ -f "$DATA/PG_VERSION" ] && answers; then
    # fast: sessions are ended, the server shuts down cleanly; at most 30 s, then immediate.
    as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w -t 30 stop >/dev/null 2>&1 ||
      as_owner "$BIN/pg_ctl" -D "$DATA" -m immediate -w -t 10 stop >/dev/null 2>&1 ||
      die "the server in $DATA does not stop: see $DIR/server.log"
  fi
  rm -rf "$DIR"
  echo "local-postgres.sh: stop: stopped, $DIR removed" >&2
}

# The server killed mid-work (pg_ctl -m immediate: no clean shutdown, sessions cut): the tests
# of a server lost in the middle of `history add`.
halt() {
  need_tools
  [ -f "$MARK" ] && [ -f "$DATA/PG_VERSION" ] || die "halt: no server made by local-postgres.sh in $DIR"
  answers || return 0
  as_owner "$BIN/pg_ctl" -D "$DATA" -m immediate -w -t 10 stop >/dev/null || die "halt: the server did not stop"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  halt) halt ;;
  status)
    [ -n "$BIN" ] && [ -f "$DATA/PG_VERSION" ] && answers || { echo "local-postgres.sh: not running" >&2; exit 1; }
    echo "local-postgres.sh: running on 127.0.0.1:$PORT" >&2
    ;;
  url)
    [ -f "$DIR/password" ] || die "not started ($DIR/password missing): launch/postgres/local-postgres.sh start"
    url
    ;;
  *)
    echo "usage: launch/postgres/local-postgres.sh start|stop|halt|status|url" >&2
    exit 64
    ;;
esac
