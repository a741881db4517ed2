# The two commands a fresh machine needs: `make up` and `make test` (README).
PYTHON ?= python3
UV := $(PYTHON) -m uv
RUN := $(UV) run --frozen --all-packages
# One environment with every dependency group (dev and bench): an exact `uv sync` uninstalls
# the groups it is not given, so a sync without `--all-groups` would take away what
# `make bench-peers` installed (tests/integration/test_make_install.py).
SYNC := $(UV) sync --frozen --all-packages --all-groups

.PHONY: install up test lint fmt bench bench-peers clean images deps

install:
	@$(PYTHON) -m uv --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet --disable-pip-version-check uv
	$(SYNC)

up: install
	$(RUN) ferry dev up

lint: install
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) mypy libs services sdk spark

fmt: install
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

# Docker images for deploy/docker-compose.yml, built without any registry (deploy/README.md);
# reused when nothing changed. `make test` builds them too when a Docker engine answers.
images: install
	$(PYTHON) deploy/build_images.py

# What the tests need from Debian: chromium and its driver (the console's browser tests), etcd
# 3.4 (the controller's store; tests start their own instance, ferry.runtime.etcd), and tcpdump
# (the test that nothing crosses loopback in clear with tlsEnable).
# Installed only when missing; CI runs as root on Debian bookworm.
deps:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq chromium chromium-driver >/dev/null; }
	@test -x /usr/bin/etcd || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq etcd-server >/dev/null; }
	@command -v tcpdump >/dev/null 2>&1 || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq tcpdump >/dev/null; }

# One worker: with two (-n 2 --dist loadgroup, conftest.py) the Docker tier, Spark and the
# failover tests together loaded the 2 cores to 12-16 and timing-bound tests failed that pass
# alone (2026-11-27, two runs). `pytest -n 2 --dist loadgroup` stays available by hand.
test: lint deps
	$(PYTHON) deploy/build_images.py --if-docker --start-engine
	$(RUN) pytest --durations 25

bench: install
	$(RUN) python bench/run.py

# Ferry against Redis Streams, NATS JetStream and RabbitMQ (docs/benchmarks.md, "Peers"):
# installs the brokers (apt) when missing; their Python clients (the `bench` group) come with
# `install`. `make bench-peers ARGS=--quick` for a smoke run.
bench-peers: install
	@sh bench/peers/install.sh
	$(RUN) python bench/compare_peers.py $(ARGS)

clean:
	rm -rf .venv .ferry .pytest_cache .mypy_cache .ruff_cache
