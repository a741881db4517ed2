#!/bin/sh
# Builds what bench/peers/rocketmq_rust.py runs, each step skipped when already built:
# - RocketMQ in Rust, crates.io's rocketmq-namesrv and rocketmq-broker 1.0.0 (cargo install,
#   binaries in .ferry/peers/rocketmq-rust/bin);
# - the benchmark driver bench/peers/rocketmq-rust-driver (rocketmq-client-rust 1.0.0), built
#   into .ferry/peers/rust-driver-target, outside the source tree.
# Both under nice -n 19. On 2 busy shared cores, side by side, the servers took 77 minutes and
# the driver 25 (2026-12-03); a rebuild of the driver alone, a few minutes. Needs cargo >= 1.95.
set -e
cd "$(dirname "$0")/../.."
PEERS="$PWD/.ferry/peers"
BIN="$PEERS/rocketmq-rust/bin"
DRIVER_DIR="$PWD/bench/peers/rocketmq-rust-driver"
TARGET="$PEERS/rust-driver-target"
command -v cargo >/dev/null 2>&1 || { echo "cargo is not installed (rustup, 1.95 or newer)"; exit 2; }
mkdir -p "$PEERS"
if [ -x "$BIN/rocketmq-namesrv-rust" ] && [ -x "$BIN/rocketmq-broker-rust" ]; then
    echo "RocketMQ-Rust 1.0.0: already in $BIN"
else
    echo "RocketMQ-Rust 1.0.0: cargo install rocketmq-namesrv rocketmq-broker into $PEERS/rocketmq-rust"
    nice -n 19 cargo install --locked --root "$PEERS/rocketmq-rust" \
        rocketmq-namesrv@1.0.0 rocketmq-broker@1.0.0
fi
DRIVER="$TARGET/release/driver"
stale() {  # the driver is missing or older than one of its sources
    [ ! -x "$DRIVER" ] && return 0
    [ -n "$(find "$DRIVER_DIR/Cargo.toml" "$DRIVER_DIR/Cargo.lock" "$DRIVER_DIR/src" \
        -newer "$DRIVER" -print 2>/dev/null)" ]
}
if stale; then
    echo "driver: cargo build --release (target $TARGET)"
    CARGO_TARGET_DIR="$TARGET" nice -n 19 cargo build --release --locked \
        --manifest-path "$DRIVER_DIR/Cargo.toml"
else
    echo "driver: already built ($DRIVER)"
fi
echo "ready: $BIN/rocketmq-namesrv-rust, $BIN/rocketmq-broker-rust, $TARGET/release/driver"
