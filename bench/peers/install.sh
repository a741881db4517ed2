#!/bin/sh
# Installs the peer brokers from Debian's packages when missing (`make bench-peers` runs it).
# Idempotent and quiet; the harness starts its own instances on free loopback ports, so the
# services the packages may enable system-wide are never used.
set -e
have() { command -v "$1" >/dev/null 2>&1; }
if have redis-server && have nats-server && [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    exit 0
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "installing redis-server nats-server rabbitmq-server (apt-get)"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    redis-server nats-server rabbitmq-server >/dev/null
