#!/usr/bin/env bash
# Retakes the dashboard screenshots of the README (docs/dashboard-*.png) in headless Chromium:
# a server with a little history, workers at work, and the jobs, job and queues pages.
# Needs Chromium or Chrome (Debian: apt-get install chromium; or set BATON_TEST_CHROME).
set -euo pipefail
cd "$(dirname "$0")/.."
BATON_UI_SCREENSHOTS="$(pwd)/docs" go test -count=1 -run '^TestScreenshots$' -v ./internal/ui
