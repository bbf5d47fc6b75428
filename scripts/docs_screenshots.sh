#!/usr/bin/env bash
# Build the manual and take screenshots of three pages with headless Chromium (Debian's `chromium` package):
# the start page, the Comm.allreduce reference entry and the guide page on writing your own algorithm.
#   scripts/docs_screenshots.sh [OUT_DIR]        (default: ./screens; the HTML goes to docs/_build/html)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-screens}"
html=docs/_build/html
browser="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$browser" ]; then
    echo "docs_screenshots: no chromium on PATH (Debian: apt-get install -y chromium)" >&2
    exit 2
fi
python -m sphinx -W -q -b html docs "$html"
mkdir -p "$out"
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
# Headless Chromium does not render a page scrolled to a fragment (the capture comes out blank above the
# anchor), so the reference entry is shot from a copy of its page in which the entries above it are hidden
# (display: none) and the page's title, the navigation and the entry itself stay as they are.
entry_page() {   # PAGE ID -> a copy of PAGE beside it, showing ID first
    local src="$html/$1" copy="$html/${1%.html}.shot.html"
    python - "$src" "$copy" "$2" <<'PY'
import sys
src, copy, anchor = sys.argv[1:]
script = """<script>document.addEventListener("DOMContentLoaded", () => {
  let node = document.getElementById(%r).parentElement;
  while (node && node.tagName !== "ARTICLE") {
    for (let s = node.previousElementSibling; s; s = s.previousElementSibling)
      if (!/^H1$/.test(s.tagName) && !s.querySelector("h1")) s.style.display = "none";
    node = node.parentElement;
  }
});</script>""" % anchor
html = open(src, encoding="utf-8").read()
open(copy, "w", encoding="utf-8").write(html.replace("</head>", script + "</head>", 1))
PY
    echo "${1%.html}.shot.html"
}
shoot() {   # NAME PAGE [HEIGHT]
    "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$profile" --hide-scrollbars --window-size="1400,${3:-1100}" \
        --screenshot="$out/$1.png" "file://$PWD/$html/$2" >/dev/null 2>&1
    echo "$out/$1.png"
}
shoot start index.html
shot="$(entry_page reference/api/comm.html hcomm_cffi.api.Comm.allreduce)"
shoot comm-allreduce "$shot"
rm -f "$html/$shot"
shoot guide-own-algorithm guide/own-algorithm.html 1500
