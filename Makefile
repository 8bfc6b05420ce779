# Every target bootstraps what it needs: the .venv with the project installed, and the system
# packages the tests and demo drive (kcat, redis for the benchmark peer, a JDK for Spark).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.floe-installed
SYSSTAMP := $(VENV)/.floe-sysdeps
APT_PACKAGES := kcat redis-server redis-tools default-jre-headless

.PHONY: fuzz test demo bench faults lint sysdeps venv clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

$(SYSSTAMP): | $(STAMP)
	@missing=""; \
	command -v kcat >/dev/null || missing="$$missing kcat"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v redis-benchmark >/dev/null || missing="$$missing redis-tools"; \
	command -v java >/dev/null || missing="$$missing default-jre-headless"; \
	if [ -n "$$missing" ]; then \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
	  echo "installing system packages:$$missing"; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	touch $(SYSSTAMP)

sysdeps: $(SYSSTAMP)

test: $(STAMP) $(SYSSTAMP)
	$(PY) -m pytest -q -m "not faults" -p no:cacheprovider --durations=30

faults: $(STAMP) $(SYSSTAMP)
	$(PY) -m pytest -q -m faults -p no:cacheprovider
	FLOE_FAULTS_SECURITY=sasl_ssl $(PY) -m pytest -q -m faults -p no:cacheprovider tests/faults

fuzz: $(STAMP) $(SYSSTAMP)
	FLOE_HYPOTHESIS_PROFILE=explore $(PY) -m pytest -q -m "not faults" -p no:cacheprovider

lint: $(STAMP)
	$(VENV)/bin/ruff check .

demo: $(STAMP) $(SYSSTAMP)
	$(VENV)/bin/floe local demo
	$(VENV)/bin/floe local demo --security sasl_ssl --data-dir .floe/demo-secured

bench: $(STAMP) $(SYSSTAMP)
	$(PY) bench/log_append.py

clean:
	rm -rf $(VENV) .floe
