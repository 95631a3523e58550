# Sourced by ci/gpu.sh and ci/build.sh: choose the cuDNN to build against.
#
# CUDNN_ROOT set by the caller wins. Otherwise: the PyTorch wheel's cuDNN under
# /opt/torch/.venv when present (it has include/ and lib/ with only the versioned
# libcudnn.so.9), else the newest cuDNN found by its cudnn_version.h (other Python
# wheels, /usr/local/cuda, /usr/local/cudnn, /usr). The system cuDNN 9.14 in
# /usr/lib/x86_64-linux-gnu has known SDPA bugs, so it is the last resort.
#
# Sets and exports CUDNN_ROOT (empty when none is found), sets CUDNN_LIBDIR and
# puts it first on LD_LIBRARY_PATH so that the binaries load the same library.
cudnn_log() { printf '[cudnn] %s\n' "$*" >&2; }

cudnn_version() {  # version string of a cuDNN root from its header, or empty
  local h
  for h in "$1/include/cudnn_version.h" "$1/include/x86_64-linux-gnu/cudnn_version_v9.h"; do
    if [[ -f "$h" ]]; then
      awk '/#define CUDNN_MAJOR /{a=$3} /#define CUDNN_MINOR /{b=$3} /#define CUDNN_PATCHLEVEL /{c=$3}
           END{if (a != "") printf "%s.%s.%s", a, b, c}' "$h"
      return
    fi
  done
}
cudnn_libdir() {  # the directory holding libcudnn.so* under a cuDNN root
  local d
  for d in "$1/lib" "$1/lib64" "$1/lib/x86_64-linux-gnu"; do
    if compgen -G "$d/libcudnn.so*" >/dev/null; then echo "$d"; return; fi
  done
}

TORCH_CUDNN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn
if [[ -z "${CUDNN_ROOT:-}" ]]; then
  candidates=()
  if [[ -d "$TORCH_CUDNN" ]]; then candidates+=("$TORCH_CUDNN"); fi
  while IFS= read -r d; do candidates+=("$d"); done < <(
    find /opt /usr/local/lib /usr/lib/python3* -maxdepth 7 -type d -path '*/nvidia/cudnn' 2>/dev/null | sort -u)
  for d in /usr/local/cuda /usr/local/cudnn /usr; do candidates+=("$d"); done
  newer() { [[ "$1" != "$2" && "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n 1)" == "$1" ]]; }  # $1 > $2
  best="" best_v=""
  for d in "${candidates[@]}"; do
    v=$(cudnn_version "$d")
    lib=$(cudnn_libdir "$d")
    if [[ -z "$v" || -z "$lib" ]]; then continue; fi
    cudnn_log "cuDNN candidate: $d (version $v, libraries in $lib)"
    if [[ "$d" == "$TORCH_CUDNN" ]]; then best=$d; best_v=$v; break; fi  # preferred
    if [[ -z "$best" ]] || newer "$v" "$best_v"; then best=$d; best_v=$v; fi
  done
  CUDNN_ROOT=$best
fi
if [[ -n "${CUDNN_ROOT:-}" ]]; then
  CUDNN_LIBDIR=$(cudnn_libdir "$CUDNN_ROOT")
  cudnn_log "cuDNN: using $CUDNN_ROOT (header version $(cudnn_version "$CUDNN_ROOT"))"
  export CUDNN_ROOT
  export LD_LIBRARY_PATH="$CUDNN_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  CUDNN_LIBDIR=""
  cudnn_log "cuDNN: none found; the cudnn backend will not be built"
fi
