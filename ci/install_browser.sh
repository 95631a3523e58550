#!/usr/bin/env bash
# Install what the HTML report needs and what its test drives (idempotent):
#  - reports/node_modules via `npm ci` from reports/package-lock.json: vega,
#    vega-lite and vega-embed (their minified bundles are inlined into every
#    report.html), ajv (JSON Schema validation of report.json in tests) and
#    playwright-core (drives the browser in tests/test_report_html);
#  - Debian's chromium (headless rendering of report.html in tests).
# Called from ci/bootstrap.sh on a fresh Debian machine with node >= 20 and npm.
# Needs root (or sudo) for apt-get; reaches only Debian's and npm's registries.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# --- chromium (Debian package; never a browser build downloaded by playwright)
if ! command -v chromium >/dev/null 2>&1; then
  echo "install_browser: installing Debian's chromium"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    chromium fonts-dejavu-core >/dev/null
fi
echo "install_browser: $(chromium --version 2>/dev/null || echo 'chromium: version unknown')"

# --- node and npm must come with the machine
for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "install_browser: $tool not found; install node >= 20 and npm first" >&2
    exit 1
  fi
done

# --- reports/node_modules, reinstalled only when the lock file changed
lock="$root/reports/package-lock.json"
stamp="$root/reports/node_modules/.attnbench-lock.sha256"
want="$(sha256sum "$lock" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && \
   [ -f "$root/reports/node_modules/vega/build/vega.min.js" ]; then
  echo "install_browser: reports/node_modules up to date"
else
  echo "install_browser: npm ci in reports/"
  # PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: playwright-core downloads nothing by itself,
  # but make sure no install step reaches for a browser build.
  (cd "$root/reports" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
  echo "$want" > "$stamp"
fi
echo "install_browser: done"
