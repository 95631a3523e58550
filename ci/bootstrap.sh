#!/usr/bin/env bash
# Install the Debian packages attnbench builds against, idempotently: nothing is
# downloaded when everything is already present. CUDA (nvcc, cuBLAS, cuDNN) is
# expected from the CUDA install under /usr/local/cuda and is optional: without it
# the CPU parts build and the GPU backends are left out. libvalijson-dev (report
# schema validation on load) is optional for the build: without it reports are
# read unvalidated, with a note. libsqlite3-dev and libsqlitecpp-dev hold the
# results history's SQLite store (required); libpq-dev its PostgreSQL client
# (optional for the build: without it postgresql:// databases are refused). The
# PostgreSQL server is only for its test (ci/install_postgres.sh). rapidjson-dev
# is the fast reader of large reports (optional for the build: without it every
# report is read by nlohmann's parser, with the same results).
set -euo pipefail

packages=(cmake g++ make libeigen3-dev nlohmann-json3-dev libcli11-dev doctest-dev libbenchmark-dev libvalijson-dev
          rapidjson-dev libsqlite3-dev libsqlitecpp-dev libpq-dev zlib1g-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  # An offline machine (or one whose libraries were installed without dpkg) may
  # still build: warn and let the CMake configure step name what is really missing.
  # Short network timeouts and no retries: an offline machine fails here in seconds.
  apt_net=(-o Acquire::Retries=0 -o Acquire::http::Timeout=15 -o Acquire::https::Timeout=15)
  if ! { $SUDO apt-get "${apt_net[@]}" update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${apt_net[@]}" install -y -qq \
           --no-install-recommends "${missing[@]}"; }; then
    echo "bootstrap: WARNING: could not install ${missing[*]} with apt-get; continuing with what is installed" >&2
  fi
else
  echo "bootstrap: build dependencies present"
fi

# Optional: clang with libFuzzer for ci/fuzz.sh (libclang-rt-dev holds
# libclang_rt.fuzzer). Never fatal: without them fuzzing is skipped with a message.
optional=(clang libclang-rt-dev)
missing_opt=()
for p in "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing_opt+=("$p")
done
if ((${#missing_opt[@]})) && [[ "${ATTNBENCH_NO_FUZZ:-0}" != 1 ]]; then
  echo "bootstrap: installing (optional, for fuzzing) ${missing_opt[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o Acquire::Retries=0 -o Acquire::http::Timeout=15 install -y -qq \
       --no-install-recommends "${missing_opt[@]}"; then
    echo "bootstrap: note: could not install ${missing_opt[*]}; ci/fuzz.sh will skip fuzzing" >&2
  fi
fi
