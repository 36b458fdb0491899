#!/usr/bin/env bash
# scripts/plot.py renders every plot kind from generated data (--selftest). matplotlib is optional for
# halfgrad (the programs write CSV/JSON without it): exit 77 (CTest: skipped) when it is missing.
set -euo pipefail
py=/usr/bin/python3
[ -x "$py" ] || py=python3
if ! "$py" -c "import matplotlib" 2>/dev/null; then
  echo "matplotlib is not installed (apt-get install python3-matplotlib): skipping"
  exit 77
fi
exec "$py" "$(dirname "$0")/../../scripts/plot.py" --selftest
