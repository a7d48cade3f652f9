#!/usr/bin/env bash
# The headless browser that tests/unit/test_report_browser.py drives: Debian's chromium and
# chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver). Installs them where they are missing and
# this user may (root); elsewhere says what to install, and the browser tests skip (or fail under CI).
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
else
    echo "note: the browser tests need Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)" >&2
fi
