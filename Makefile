# The two commands a fresh machine needs: `make up` and `make test` (README).
PYTHON ?= python3
UV := $(PYTHON) -m uv
RUN := $(UV) run --frozen --all-packages

.PHONY: install up test lint fmt bench clean images

install:
	@$(PYTHON) -m uv --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet --disable-pip-version-check uv
	$(UV) sync --frozen --all-packages

up: install
	$(RUN) ferry dev up

lint: install
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) mypy libs services sdk

fmt: install
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

# Docker images for deploy/docker-compose.yml, built without any registry (deploy/README.md);
# reused when nothing changed. `make test` builds them too when a Docker engine answers.
images: install
	$(PYTHON) deploy/build_images.py

test: lint
	$(PYTHON) deploy/build_images.py --if-docker
	$(RUN) pytest

bench: install
	$(RUN) python bench/run.py

clean:
	rm -rf .venv .ferry .pytest_cache .mypy_cache .ruff_cache
