"""One offline synth per stage for the whole session: jsii start-up and bundling cost seconds.

The dependency layer is not built here (that downloads ~95 MiB of wheels): the stack is pointed at
a stand-in layer directory holding only the manifest layers/build.py writes. What the tests check
is the stack's wiring; layers/build.py checks the real layer's contents when it builds it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from infra.constructs.function import LAYER_MANIFEST, PYTHON_VERSION
from tests.infra.helpers import Synth, synthesize

STAGES = ("dev", "team", "prod")


@pytest.fixture(scope="session")
def stand_in_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    layer = tmp_path_factory.mktemp("layer")
    (layer / "python").mkdir()
    (layer / LAYER_MANIFEST).write_text(
        json.dumps({"python_version": PYTHON_VERSION, "lock_sha256": "0" * 64})
    )
    return layer


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory, stand_in_layer: Path) -> Iterator[Callable[[str], Synth]]:
    cache: dict[str, Synth] = {}

    def get(stage: str) -> Synth:
        if stage not in cache:
            cache[stage] = synthesize(stage, tmp_path_factory.mktemp(f"cdk-{stage}"), stand_in_layer)
        return cache[stage]

    yield get


@pytest.fixture(scope="session", params=STAGES)
def each_stage(request: pytest.FixtureRequest, synth: Callable[[str], Synth]) -> Synth:
    return synth(request.param)


@pytest.fixture(scope="session")
def dev(synth: Callable[[str], Synth]) -> Synth:
    return synth("dev")


@pytest.fixture(scope="session")
def team(synth: Callable[[str], Synth]) -> Synth:
    return synth("team")


@pytest.fixture(scope="session")
def prod(synth: Callable[[str], Synth]) -> Synth:
    return synth("prod")
