#!/usr/bin/env bash
# Optional system packages for tests that skip without them: Debian's chromium (HTML report
# rendering test) and NVIDIA Nsight Systems 2022.4 from non-free (raw report export test).
set -uo pipefail
if [ "$(id -u)" != 0 ]; then echo "not root: skipping system packages"; exit 0; fi
apt-get update -qq >/dev/null 2>&1 || true
if ! command -v chromium >/dev/null 2>&1; then
  timeout 900 apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 \
    && echo "installed chromium" || echo "chromium not installed"
fi
if [ -f .ci/install-nsys.sh ]; then timeout 1200 bash .ci/install-nsys.sh || true; fi
exit 0
