"""cdk-nag, cfn-lint, the acknowledgement list in docs/, and the layer's interpreter."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath
from types import ModuleType

import pytest
from aws_cdk import App, Stack, Validations
from aws_cdk import aws_sqs as sqs
from cdk_nag import AwsSolutionsChecks
from cfnlint.api import lint
from cfnlint.config import ManualArgs

from infra.config import ROOT
from infra.constructs.function import (
    LAYER_MANIFEST,
    PYTHON_VERSION,
    RUNTIME,
    DependencyLayer,
    LayerNotReady,
    is_dev_kit,
)
from tests.infra.helpers import Synth

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------- cdk-nag


def test_aws_solutions_reports_nothing_unacknowledged(each_stage: Synth) -> None:
    report = each_stage.validation_report()

    findings = [
        f"{v['severity']} {v['ruleName']} at {[c['constructPath'] for c in v['violatingConstructs']]}"
        for plugin in report["pluginReports"]
        for v in plugin["violations"]
    ]
    assert findings == []


def test_the_pack_really_ran_and_recorded_its_acknowledgements(each_stage: Synth) -> None:
    # An empty report would also come from a pack that never ran: the acknowledgements it wrote
    # into the template (writeSuppressionsToCloudFormation) show that it did.
    rules = {rule for rule, _ in _acknowledgements(each_stage)}

    assert {"AwsSolutions-APIG4", "AwsSolutions-SMG4", "AwsSolutions-IAM5[Resource::*]"} <= rules


def test_the_pack_fails_synth_on_an_unacknowledged_finding(tmp_path: Path) -> None:
    # The same registration as infra/app.py, on a queue that breaks AwsSolutions-SQS3 and -SQS4.
    app = App(outdir=str(tmp_path))
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    sqs.Queue(Stack(app, "Bad"), "Queue")

    with pytest.raises(Exception, match="AwsSolutions-SQS4"):
        app.synth()


def _acknowledgements(synth: Synth) -> set[tuple[str, str]]:
    return {
        (rule["id"], rule["reason"])
        for resource in synth.raw["Resources"].values()
        for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
    }


def test_docs_list_every_acknowledgement_with_its_reason(dev: Synth, team: Synth, prod: Synth) -> None:
    in_app = _acknowledgements(dev) | _acknowledgements(team) | _acknowledgements(prod)
    text = (ROOT / "docs" / "cdk-nag.md").read_text()
    # Table rows: | `rule` | where | stages | reason |
    in_docs = {
        (m.group(1), m.group(2).strip())
        for m in re.finditer(r"^\| `([^`]+)` \|[^|]*\|[^|]*\| (.+?) \|$", text, re.MULTILINE)
    }

    assert in_docs == in_app


# ---------------------------------------------------------------- cfn-lint

# CDK writes an explicit DependsOn on a function's role next to the GetAtt that already implies
# it; CloudFormation accepts both, cfn-lint calls the first one redundant.
ACCEPTED_LINT = {"W3005"}


def test_cfn_lint_finds_nothing_but_accepted_warnings(each_stage: Synth) -> None:
    matches = lint(json.dumps(each_stage.raw), config=ManualArgs(regions=["eu-west-1", "us-east-1"]))

    problems = [f"{m.rule.id} {m.message} ({'/'.join(map(str, m.path))})" for m in matches]
    assert [p for p in problems if p.split()[0] not in ACCEPTED_LINT] == []


# ---------------------------------------------------------------- the layer


def _layer_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("layer_build", ROOT / "layers" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_layer_is_built_and_locked_for_the_functions_runtime() -> None:
    build = _layer_build()
    lock = (ROOT / "layers" / "requirements.lock").read_text()

    assert build.PYTHON_VERSION == PYTHON_VERSION
    assert RUNTIME.name == f"python{PYTHON_VERSION}"
    assert build.lock_python_version(lock) == PYTHON_VERSION
    assert f"cpython-{PYTHON_VERSION.replace('.', '')}-aarch64-linux-gnu" == build.ABI_TAG


def test_every_locked_requirement_is_pinned_with_hashes() -> None:
    lock = (ROOT / "layers" / "requirements.lock").read_text()
    requirements = re.findall(
        r"^([A-Za-z0-9_.\-]+)==\S+ \\\n((?:\s+--hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", lock, re.M
    )
    names = re.findall(r"^[A-Za-z0-9_.\-]+(?===)", lock, re.M)

    assert len(requirements) == len(names) > 0
    assert {"pydantic", "aws-lambda-powertools", "boto3", "openai", "opensearch-py"} <= set(names)


# The offline embedding model imports these on its first embedding only, and never on Lambda (the
# aws backend embeds with Bedrock or OpenAI; "auto" means none there). The layer leaves them out on
# purpose; the module itself imports without them. Nothing else may import them.
LOCAL_MODEL = ROOT / "shared" / "memory" / "embeddings" / "minilm.py"
LOCAL_MODEL_ONLY = {"tokenizers", "safetensors"}


def _runtime_imports(*folders: Path, skip: Path | None = None) -> set[str]:
    """Top-level modules imported by these folders' code, leaving out `if TYPE_CHECKING:` blocks."""
    modules: set[str] = set()
    for path in (p for folder in folders for p in folder.rglob("*.py")):
        # The dev kit (the local runtimes, the CLI, the embedded backend) never runs on Lambda.
        if is_dev_kit(PurePosixPath(path.relative_to(ROOT).as_posix())) or path == skip:
            continue
        tree = ast.parse(path.read_text())
        type_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - {"__future__", "shared", "functions"}


def test_everything_the_functions_import_is_in_the_layer_lock() -> None:
    # A module imported at run time but missing from the lock would fail only on Lambda, at import.
    def normalise(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    distributions = importlib.metadata.packages_distributions()
    lock = (ROOT / "layers" / "requirements.lock").read_text()
    locked = {normalise(n) for n in re.findall(r"^[A-Za-z0-9_.\-]+(?===)", lock, re.M)}
    imported = _runtime_imports(ROOT / "shared", ROOT / "functions")
    assert not LOCAL_MODEL_ONLY & _runtime_imports(ROOT / "shared", ROOT / "functions", skip=LOCAL_MODEL)
    imported -= LOCAL_MODEL_ONLY

    unlocked = {
        module: distributions.get(module, [module])
        for module in imported
        if not any(normalise(d) in locked for d in distributions.get(module, [module]))
    }
    assert imported
    assert unlocked == {}


def test_a_layer_built_for_another_python_is_refused(tmp_path: Path) -> None:
    (tmp_path / "python").mkdir()
    (tmp_path / LAYER_MANIFEST).write_text(json.dumps({"python_version": "3.11"}))

    with pytest.raises(LayerNotReady, match=r"built for Python 3\.11"):
        DependencyLayer(Stack(App(), "S"), "Layer", layer_dir=tmp_path)


def test_a_missing_layer_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(LayerNotReady, match="make layer"):
        DependencyLayer(Stack(App(), "S"), "Layer", layer_dir=tmp_path)


def test_synth_without_a_layer_says_so_in_one_line(tmp_path: Path) -> None:
    """`cdk synth` before `make layer`: the app's whole output is one line naming the fix."""
    result = subprocess.run(
        [sys.executable, "-m", "infra.app"],
        cwd=ROOT,
        env={
            **os.environ,
            "CDK_CONTEXT_JSON": json.dumps({"layer_dir": str(tmp_path)}),
            # jsii's own banner about node 20's end of life is not the app's output.
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        },
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [
        f"sigil synth: no dependency layer in {tmp_path}: run `make layer` (layers/build.py) before synth"
    ]
