#!/usr/bin/env bash
# Regenerate docs/screenshots: the page tests in a real browser (Debian's chromium) take them; the ones the docs
# show are copied over (tests/helpers/browser.py palette-compresses every PNG; the tests keep each under 150 KB).
#   bash scripts/screenshots.sh        # from the repository root, after the dev set-up (make setup)
set -euo pipefail
cd "$(dirname "$0")/.."
SHOTS="$(mktemp -d)"
trap 'rm -rf "$SHOTS"' EXIT
RADSCREEN_SCREENSHOT_DIR="$SHOTS" PYTHONPATH="$PWD" .venv/bin/python -m pytest -q -p no:cacheprovider \
  tests/service/test_dashboard.py tests/service/test_exam_page.py tests/service/test_page_words.py
DOCUMENTED=(
  outcome-refer_referable_dr.png outcome-grader_review_uncertain.png outcome-retake_ungradable.png
  outcome-no_referable_dr.png batch-outcomes.png exam-refer.png
  words-refer-near-threshold-desktop.png words-refer-confident-desktop.png words-uncertain-phone.png
  words-healthy-desktop.png words-exam-retake-desktop.png words-exam-retake-phone.png
)
for name in "${DOCUMENTED[@]}"; do
  cp "$SHOTS/$name" docs/screenshots/
done
ls -l docs/screenshots
