#!/usr/bin/env bash
# The test command: installs prerequisites, checks formatting and lints, runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# Doc links that resolve nowhere (or to private items) fail like lint warnings.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
# Build every artifact first: integration tests link the runtime's C libraries
# (librdx_runtime_c.a/.so) and run the workspace's binaries.
cargo build --workspace
cargo test --workspace --no-fail-fast
