#!/usr/bin/env bash
# Installs the pinned JavaScript test oracles (package-lock.json) into tools/js-oracles/node_modules.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/@huggingface/jinja ] || [ ! -d node_modules/openai ]; then
  npm ci --ignore-scripts --no-audit --no-fund
fi
