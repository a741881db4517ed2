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

# Two phases (conftest.py says which tests are `serial`, docs/perf-notes/2026-11-28-suite-time.md the
# figures): the tests that are not timing-bound on two workers, each file on one of them; then
# the timing-bound ones (elections, leases, restarts, elapsed time, Docker, Spark, the
# browser), also on two workers, but with the ones that start several broker trees, a
# controller or a Docker stack one after another on one worker (conftest.py HEAVY_MODULES):
# with everything on two workers at once the load reached 12-16 and tests failed that pass
# alone (2026-11-27). Both phases always run; make fails when either does, with the first
# failing status.
PYTEST_PARALLEL := pytest -n 2 --dist loadgroup -m "not serial" --durations 25
PYTEST_SERIAL := pytest -n 2 --dist loadgroup -m serial --durations 25

test: lint deps
	$(PYTHON) deploy/build_images.py --if-docker --start-engine
	parallel=0; serial=0; \
	$(RUN) $(PYTEST_PARALLEL) || parallel=$$?; \
	$(RUN) $(PYTEST_SERIAL) || serial=$$?; \
	echo "make test: parallel phase exit $$parallel, serial phase exit $$serial"; \
	if [ $$parallel -ne 0 ]; then exit $$parallel; fi; exit $$serial

bench: install
	$(RUN) python bench/run.py

# Ferry against Redis Streams, NATS JetStream and RabbitMQ (docs/benchmarks.md, "Peers"):
# installs the brokers (apt) when missing; their Python clients (the `bench` group) come with
# `install`. Then RocketMQ itself, in Rust, against Ferry's RocketMQ door with one Rust client
# (docs/benchmarks.md, "RocketMQ in Rust"): the first run builds it from crates.io (over an
# hour on 2 cores; kept under .ferry/peers), which is why it is not part of `make test`.
# `make bench-peers ARGS=--quick` for a smoke run.
bench-peers: install
	@sh bench/peers/install.sh
	$(RUN) python bench/compare_peers.py $(ARGS)
	@sh bench/peers/install_rocketmq_rust.sh
	$(RUN) python bench/peers/rocketmq_rust.py $(ARGS)

clean:
	rm -rf .venv .ferry .pytest_cache .mypy_cache .ruff_cache
