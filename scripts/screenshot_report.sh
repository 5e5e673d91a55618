#!/usr/bin/env bash
# Renders a fragscope HTML report in headless Chromium and saves a PNG, to check that the report
# draws (timeline, segment maps, tables) without network access.
#
#   scripts/screenshot_report.sh REPORT.html [OUT.png] [WIDTH] [HEIGHT]
#
# Without REPORT.html arguments it first runs `fragscope demo` (build/fragscope, or $FRAGSCOPE)
# into a temporary directory. Needs Debian's `chromium` (or $CHROMIUM).
set -euo pipefail

chromium="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
if [[ -z "${chromium}" ]]; then
  echo "screenshot_report.sh: chromium not found (apt-get install chromium, or set CHROMIUM)" >&2
  exit 2
fi
report="${1:-}"
if [[ -z "${report}" ]]; then
  fragscope="${FRAGSCOPE:-$(dirname "$0")/../build/fragscope}"
  tmp="$(mktemp -d)"
  (cd "${tmp}" && "${fragscope}" demo --html report.html > demo.txt)
  report="${tmp}/report.html"
fi
out="${2:-${report%.html}.png}"
width="${3:-1100}"
height="${4:-3200}"
if grep -qiE '(src|href)="https?:' "${report}"; then
  echo "screenshot_report.sh: ${report} references the network" >&2
  exit 1
fi
# --no-sandbox: containers and root shells; the page is our own file.
"${chromium}" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --window-size="${width},${height}" --screenshot="${out}" "file://$(realpath "${report}")" \
  2> >(grep -v -E 'dbus|Fontconfig|sandbox|GPU|gpu' >&2 || true)
test -s "${out}"
echo "${out}"
