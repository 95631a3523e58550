#!/usr/bin/env bash
# Install Debian's PostgreSQL server for the history test on a real server
# (tests/history_pg_test.sh, ctest `history_postgresql`), idempotently. Only the
# package is installed (its own cluster is not needed: the test starts a private
# server and stops it). Where apt-get cannot install it, warns and returns 0: the
# test then skips loudly, saying why. Never needed to build or run attnbench.
set -uo pipefail
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "install_postgres: postgresql present"
  exit 0
fi
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
echo "install_postgres: installing postgresql"
if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
         --no-install-recommends postgresql >/dev/null; }; then
  echo "install_postgres: WARNING: could not install postgresql; the history_postgresql test will skip" >&2
fi
exit 0
