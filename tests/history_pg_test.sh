#!/usr/bin/env bash
# The results history against a real PostgreSQL server (ctest history_postgresql):
#   tests/history_pg_test.sh TEST_HISTORY_BINARY
# Starts a private server (initdb + pg_ctl in a temporary folder, listening only
# on a unix socket there; as the postgres user when run as root, since the server
# refuses root), runs the "postgresql:" cases of test_history against it, and
# stops it on any exit. Exits 77 (skipped, saying why) where the server is not
# installed (ci/install_postgres.sh installs Debian's postgresql).
set -uo pipefail
bin="${1:?usage: history_pg_test.sh TEST_HISTORY_BINARY}"
pgbin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
if [[ -z "$pgbin" || ! -x "$pgbin/initdb" || ! -x "$pgbin/pg_ctl" ]]; then
  echo "SKIPPED: no PostgreSQL server (/usr/lib/postgresql/*/bin/initdb); ci/install_postgres.sh installs it"
  exit 77
fi
dir="$(mktemp -d /tmp/attnbench_pg.XXXXXX)"
as_server=()
if [[ $(id -u) -eq 0 ]]; then
  if ! id postgres >/dev/null 2>&1; then
    echo "SKIPPED: running as root and there is no postgres user to run the server as"
    rm -rf "$dir"
    exit 77
  fi
  chown postgres "$dir"
  as_server=(runuser -u postgres --)
fi
chmod 755 "$dir"
stop() {
  "${as_server[@]}" "$pgbin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1
  rm -rf "$dir"
}
trap stop EXIT
start=$(date +%s)
if ! "${as_server[@]}" "$pgbin/initdb" -D "$dir/data" -U postgres -A trust --no-sync >"$dir/initdb.log" 2>&1; then
  cat "$dir/initdb.log"
  echo "FAILED: initdb"
  exit 1
fi
if ! "${as_server[@]}" "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
     -o "-k $dir -c listen_addresses= -p 5432 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
     start >/dev/null; then
  cat "$dir/server.log"
  echo "FAILED: the server did not start"
  exit 1
fi
echo "history_pg_test: PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}') up in $(( $(date +%s) - start )) s on $dir"
export ATTNBENCH_TEST_PG_SOCKET="$dir" ATTNBENCH_TEST_PG_PORT=5432
"$bin" --test-case='postgresql:*'
rc=$?
echo "history_pg_test: done in $(( $(date +%s) - start )) s (exit $rc)"
exit $rc
