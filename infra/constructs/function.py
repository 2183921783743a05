"""The one way this stack makes a Lambda function, and the dependency layer they all share.

Every function is the same shape: Python on arm64, the handler folder plus the `shared` package
as its code, the one dependency layer, a role of its own that starts empty (no managed policy:
the stack adds exactly the grants the function needs), structured JSON logs into a log group
with retention, and X-Ray tracing for powertools' tracer.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path, PurePosixPath

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, Duration, ILocalBundling
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.config import ROOT
from infra.constructs.nag import acknowledge

# The layer's compiled wheels (pydantic-core, jiter, ...) import only on the interpreter they
# were built for, so the runtime and layers/build.py's PYTHON_VERSION move together;
# tests/infra checks that they agree.
PYTHON_VERSION = "3.14"
RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
HANDLER = "handler.lambda_handler"

FUNCTIONS_DIR = ROOT / "functions"
SHARED_DIR = ROOT / "shared"
LAYER_MANIFEST = "sigil-layer.json"
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", ".pytest_cache")


class LayerNotReady(Exception):
    """The dependency layer is missing or built for another Python: `make layer` mends both, so
    synth says that in one line (infra.app) rather than in a traceback."""


# The dev kit: the local gateway, its scheduler and runtimes, the CLI, the embedded SQLite adapters
# and the local embedding model. Their third-party packages are pyproject.toml's `local` extra (and
# dev group), which the layer leaves out, so bundling them would ship code that cannot import on
# Lambda. Prefixes (a module, or a package with everything under it) relative to the repository
# root, so a module added inside one of these packages is left out too.
DEV_KIT = (
    PurePosixPath("shared/local"),
    PurePosixPath("shared/cli"),
    # `sigil console`, the operator's web console (Starlette, served by uvicorn).
    PurePosixPath("shared/console"),
    PurePosixPath("shared/adapters/embedded"),
    # sigil.yaml is read by the operator's CLI and the local gateway (PyYAML, the `local` extra);
    # the functions read what `sigil config apply` stored.
    PurePosixPath("shared/configuration"),
    # Replay (docs/replay.md) runs turns in a sandbox on the embedded backend, from the CLI.
    PurePosixPath("shared/replay"),
    # build_embedder answers SIGIL_EMBEDDING_MODEL=local without it as misconfigured, as it does
    # without its packages.
    PurePosixPath("shared/memory/embeddings/minilm.py"),
)


def is_dev_kit(relative: PurePosixPath) -> bool:
    """Whether a path relative to the repository root is, or lies under, one of DEV_KIT."""
    return any(relative == prefix or prefix in relative.parents for prefix in DEV_KIT)


def _ignore_dev_kit(directory: str, names: list[str]) -> set[str]:
    ignored = set(_IGNORE(directory, names))
    base = Path(directory).resolve().relative_to(ROOT)
    return ignored | {name for name in names if is_dev_kit(PurePosixPath(base.as_posix(), name))}


class DependencyLayer(Construct):
    """The third-party packages, built by `make layer` (layers/build.py) from layers/requirements.lock."""

    def __init__(self, scope: Construct, construct_id: str, *, layer_dir: Path) -> None:
        super().__init__(scope, construct_id)
        manifest = _read_manifest(layer_dir)
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=lambda_.Code.from_asset(str(layer_dir)),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description=f"Sigil dependencies, lock sha256 {str(manifest.get('lock_sha256', '?'))[:12]}",
        )


def _read_manifest(layer_dir: Path) -> dict[str, object]:
    path = layer_dir / LAYER_MANIFEST
    if not (layer_dir / "python").is_dir() or not path.is_file():
        raise LayerNotReady(
            f"no dependency layer in {layer_dir}: run `make layer` (layers/build.py) before synth"
        )
    manifest: dict[str, object] = json.loads(path.read_text())
    if manifest.get("python_version") != PYTHON_VERSION:
        raise LayerNotReady(
            f"the layer in {layer_dir} was built for Python {manifest.get('python_version')}, "
            f"the functions run {PYTHON_VERSION}: run `make layer` again"
        )
    return manifest


@jsii.implements(ILocalBundling)
class _HandlerWithShared:
    """Bundles a function's code on this machine: its handler folder, with `shared/` beside it
    less the dev kit (DEV_KIT).

    CDK calls this instead of starting a container, so synth needs no Docker. The result is
    plain source; the dependencies come from the layer.
    """

    def __init__(self, handler_dir: Path) -> None:
        self._handler_dir = handler_dir

    def try_bundle(self, output_dir: str, *, image: DockerImage, **_options: object) -> bool:
        out = Path(output_dir)
        shutil.copytree(self._handler_dir, out, ignore=_IGNORE, dirs_exist_ok=True)
        shutil.copytree(SHARED_DIR, out / "shared", ignore=_ignore_dev_kit, dirs_exist_ok=True)
        # Returning False would make CDK fall back to Docker; copying either works or raises.
        return True


def function_code(source: str) -> lambda_.Code:
    handler_dir = FUNCTIONS_DIR / source
    module, _ = HANDLER.split(".")
    if not (handler_dir / f"{module}.py").is_file():
        # A function without its handler deploys fine and fails on every invocation: stop here.
        raise FileNotFoundError(f"no {module}.py in {handler_dir} (the handler is {HANDLER})")
    return lambda_.Code.from_asset(
        str(handler_dir),
        # The asset changes when shared/ does, not only the handler folder: hash the bundle.
        asset_hash_type=AssetHashType.OUTPUT,
        bundling=BundlingOptions(
            # Never pulled: the local bundler always succeeds or raises.
            image=DockerImage.from_registry("sigil-local-bundling-only"),
            local=_HandlerWithShared(handler_dir),
        ),
    )


class SigilFunction(Construct):
    """A function from functions/{source}, with its own empty role and its log group."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        source: str,
        description: str,
        timeout: Duration,
        memory_size: int,
        layer: lambda_.ILayerVersion,
        log_group: logs.ILogGroup,
        reserved_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Sigil {source} function",
        )
        self.function = lambda_.Function(
            self,
            # Unique across the app, so `sam local invoke AgentFunction` finds it by construct id.
            f"{source.capitalize()}Function",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=HANDLER,
            code=function_code(source),
            layers=[layer],
            role=self.role,
            description=description,
            timeout=timeout,
            memory_size=memory_size,
            # A ceiling on what runs at once, and capacity no other function in the account can
            # take (infra.config.Caps); None leaves the function on the account's shared pool.
            reserved_concurrent_executions=reserved_concurrency,
            log_group=log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            application_log_level_v2=lambda_.ApplicationLogLevel.INFO,
            system_log_level_v2=lambda_.SystemLogLevel.WARN,
            tracing=lambda_.Tracing.ACTIVE,
        )
        # In place of AWSLambdaBasicExecutionRole (which may write to any log group): this one.
        log_group.grant_write(self.role)
        acknowledge(
            self.role,
            "AwsSolutions-IAM5[Resource::*]",
            "Added by CDK for active X-Ray tracing: xray:PutTraceSegments and xray:PutTelemetryRecords "
            "support no resource-level permissions, so their Resource must be *.",
        )
