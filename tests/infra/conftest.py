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
from aws_cdk.assertions import Template

from infra.app import build_app
from infra.config import ROOT
from infra.constructs.function import LAYER_MANIFEST, PYTHON_VERSION
from tests.infra.helpers import Synth

STAGES = ("dev", "prod")


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
    # The same feature flags as `npx cdk synth`, which reads them from cdk.json.
    cdk_context = json.loads((ROOT / "cdk.json").read_text())["context"]

    def get(stage: str) -> Synth:
        if stage not in cache:
            outdir = tmp_path_factory.mktemp(f"cdk-{stage}")
            context = {
                **cdk_context,
                "stage": stage,
                "layer_dir": str(stand_in_layer),
                # Report cdk-nag findings in validation-report.json instead of raising, so that the
                # nag test can show them and the other tests still run.
                "@aws-cdk/core:failSynthOnValidationErrors": False,
            }
            app, stack = build_app(context, outdir=str(outdir))
            app.synth()
            template = Template.from_stack(stack)
            cache[stage] = Synth(stage, app, stack, outdir, template, template.to_json())
        return cache[stage]

    yield get


@pytest.fixture(scope="session", params=STAGES)
def each_stage(request: pytest.FixtureRequest, synth: Callable[[str], Synth]) -> Synth:
    return synth(request.param)


@pytest.fixture(scope="session")
def dev(synth: Callable[[str], Synth]) -> Synth:
    return synth("dev")


@pytest.fixture(scope="session")
def prod(synth: Callable[[str], Synth]) -> Synth:
    return synth("prod")
