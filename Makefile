# Everything a fresh machine needs is installed by these targets (Python 3.11+, pip, node 20).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.synced

.PHONY: dev test lint bench lock clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

UV := $(BIN)/uv
RUN_STAMP := $(VENV)/.synced-run

$(UV): | $(BIN)/python
	$(BIN)/python -m pip install -q --disable-pip-version-check "uv==0.13.9"

# `make dev` installs what running needs, from requirements-run.lock (the gateway, the CLI, the
# embedded backend, the offline embedder and `sigil dev --aws`'s stand-ins), with uv's progress
# shown. `make test` syncs requirements.lock, which adds the tools (CDK, linters, Playwright).
# The run lock is compiled from the full one (`make lock`), so both pin the same versions.
$(RUN_STAMP): requirements-run.lock pyproject.toml overrides.txt | $(UV)
	@echo "make dev: installing the gateway's $$(grep -cE '^[a-z0-9]' requirements-run.lock) packages into $(VENV) (the test tools come with make test)"
	$(UV) pip install --python $(BIN)/python --no-deps --require-hashes -r requirements-run.lock
	$(UV) pip install -q --python $(BIN)/python --no-deps -e .
	touch $(RUN_STAMP)

# Reinstall only when the lock file changes; versions and hashes come from requirements.lock.
$(STAMP): requirements.lock pyproject.toml overrides.txt | $(UV)
	@echo "make: installing the $$(grep -cE '^[a-z0-9]' requirements.lock) locked packages into $(VENV)"
	$(UV) pip sync -q --python $(BIN)/python --require-hashes requirements.lock
	$(UV) pip install -q --python $(BIN)/python --no-deps -e .
	touch $(STAMP) $(RUN_STAMP)

dev: $(RUN_STAMP)
	$(BIN)/sigil dev

# The gates, cheapest first: lint, formatting (docs' Python examples too), the import contracts of
# .importlinter (docs/architecture.md's layers), types, then the suite.
test: lint
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# The dev kit's extra and both groups: a developer's venv holds everything (the layer has its own lock).
# The run lock starts from the full one, whose pins uv keeps as its preferences: the same versions.
lock:
	$(BIN)/uv pip compile -q --universal --python-version 3.11 --generate-hashes --extra local --group dev --group local \
		--group aws-mode --override overrides.txt pyproject.toml -o requirements.lock
	cp requirements.lock requirements-run.lock
	$(BIN)/uv pip compile -q --universal --python-version 3.11 --generate-hashes --extra local --group local \
		--group aws-mode --override overrides.txt pyproject.toml -o requirements-run.lock

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# ---- Infrastructure (infra/, layers/, docs/deploy.md). No Docker anywhere: the layer is pip-installed
# for the Lambda platform from layers/requirements.lock, function code is bundled by copying.
STAGE ?= dev
LAYER_MANIFEST := layers/build/sigil-layer.json
CDK := node_modules/.bin/cdk

.PHONY: layer synth deploy

layer: $(LAYER_MANIFEST)

# Rebuilt only when the lock or the build script changes.
$(LAYER_MANIFEST): layers/requirements.lock layers/build.py | $(STAMP)
	$(BIN)/python layers/build.py

$(CDK): package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $(CDK)

synth: $(LAYER_MANIFEST) $(CDK) $(STAMP)
	$(CDK) synth -c stage=$(STAGE) --quiet

deploy: $(LAYER_MANIFEST) $(CDK) $(STAMP)
	$(CDK) deploy -c stage=$(STAGE)

# ---- Benchmarks, each printing a table (docs/memory.md and docs/consolidation.md explain them):
# AWS calls per webhook event and per turn, cold imports (on moto, ~30 s); the loop's own overhead;
# LoCoMo retrieval from ../shared/bench (read there, never copied; the first run embeds ~4,000
# texts, later runs use .benchmarks/); search latency at 1k/10k/100k memories; MiniLM throughput;
# maintenance at 1k/10k/50k facts and the 5,000-turn bounded-memory run; the layer, bundles and
# cold imports before the house (deeb990) and now (~3 min); chaos, 50 sessions x 20 messages with
# faults on both backends (~7 min, docs/local-aws-mode.md); the prompt's size with 50 skills installed
# (docs/skills.md, seconds); the cost of 1,000 turns (500 measured, docs/cost.md, ~6 min). ~30 min in all.
# The wait from a message's receipt to its model call, 50 sessions at once on `sigil dev --aws`
# (~2 min), and the bytes a streamed web reply posts in the cloud (seconds): docs/scale.md.
# Fact extraction scored against gold facts on 19 conversations written for it, the recorded answers
# replayed (docs/consolidation.md, seconds; `--model provider/name` for a real model). Each outbound
# call of a turn inside a 1 s deadline against servers that answer after 6 s (docs/providers.md, ~10 s).
# Chaos with delegation: 20 sessions x 3 tasks under kills, hangs, 500s and cut streams, on both
# backends (docs/delegation.md, ~5 min).
bench: $(STAMP)
	$(BIN)/python bench/aws_calls.py
	$(BIN)/python bench/turn_overhead.py
	$(BIN)/python bench/locomo.py
	$(BIN)/python bench/memory_scale.py
	$(BIN)/python bench/embed_minilm.py
	$(BIN)/python bench/consolidation.py
	$(BIN)/python bench/extraction.py
	$(BIN)/python bench/bundle.py
	$(BIN)/python bench/redaction.py
	$(BIN)/python bench/skills_prompt.py
	$(BIN)/python bench/chaos.py
	$(BIN)/python bench/chaos.py --tasks 3
	$(BIN)/python bench/lane_wait.py
	$(BIN)/python bench/stream_bytes.py
	$(BIN)/python bench/cost.py
	$(BIN)/python bench/turn_deadline.py
	$(BIN)/python bench/sandbox.py
	$(BIN)/python bench/delegation_tokens.py
