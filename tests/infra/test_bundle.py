"""What ships to Lambda: each function's bundle without the dev kit, and a layer lock without its
packages. Each handler is imported from its real bundle in a fresh interpreter where only what the
layer holds can be imported, so cloud code that starts importing the dev kit fails here, not on
Lambda. The layer itself is built for aarch64 and CPython 3.14 and cannot load on this machine:
the venv's site-packages stand in for it, less every package the layer lock leaves out."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path, PurePosixPath

import pytest
from aws_cdk import DockerImage

from infra.config import ROOT
from infra.constructs.function import DEV_KIT, FUNCTIONS_DIR, HANDLER, _HandlerWithShared, is_dev_kit

FUNCTIONS = ("webhook", "agent", "consolidate", "ws")
# The dev kit's own libraries (pyproject.toml's `local` extra and what they pull in).
DEV_KIT_MODULES = {"typer", "rich", "starlette", "uvicorn", "apsw", "sqlite_vec", "click"}
DEV_KIT_DISTRIBUTIONS = {"typer", "rich", "starlette", "uvicorn", "apsw", "sqlite-vec", "click"}
LAYER_LOCK = ROOT / "layers" / "requirements.lock"
# What the MCP SDK requires of the dev kit's libraries (test_the_layer_lock_holds_the_cloud_core_alone).
MCP_SDK_DEPENDENCIES = frozenset({"starlette"})
# The MCP client's modules, which shared.tools.mcp imports on a turn's first MCP call.
MCP_CLIENT = ("mcp", "mcp.client.session", "mcp.client.streamable_http", "mcp.client.sse")

# Runs in `python -I -S`: no site-packages, no .pth files (the editable install's would put the
# repository's own shared/ on the path), then the bundle first and site-packages last.
IMPORT_SCRIPT = """
import importlib, importlib.abc, json, sys

bundle, site, blocked, modules = sys.argv[1], sys.argv[2], set(json.loads(sys.argv[3])), sys.argv[4:]


class NotInTheLayer(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"{name} is not in the Lambda layer", name=name)
        return None


sys.meta_path.insert(0, NotInTheLayer())
sys.path[:0] = [bundle]
sys.path.append(site)
for module in modules:
    importlib.import_module(module)
print(json.dumps({name: getattr(m, "__file__", None) for name, m in sys.modules.items()}))
"""


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _layer_distributions() -> set[str]:
    return {_normalise(n) for n in re.findall(r"^[A-Za-z0-9_.\-]+(?===)", LAYER_LOCK.read_text(), re.M)}


def _not_in_the_layer() -> set[str]:
    """Top-level modules installed here whose distributions the layer lock leaves out."""
    locked = _layer_distributions()
    return DEV_KIT_MODULES | {
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if not any(_normalise(d) in locked for d in dists)
    } - {"shared", "functions", "handler"}


def _bundle(source: str, out: Path) -> Path:
    bundler = _HandlerWithShared(FUNCTIONS_DIR / source)
    assert bundler.try_bundle(str(out), image=DockerImage.from_registry("unused"))
    return out


def _import_in_fresh_python(
    bundle: Path, *modules: str, allowed: frozenset[str] = frozenset()
) -> dict[str, str | None]:
    """Import `modules` from the bundle with only the layer's packages (and `allowed`, which the
    layer holds for a library's sake though no module of ours may import them)."""
    site = sysconfig.get_paths()["purelib"]
    args = [bundle, site, json.dumps(sorted(_not_in_the_layer() - allowed)), *modules]
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", IMPORT_SCRIPT, *map(str, args)],
        check=False,
        cwd=bundle,
        capture_output=True,
        text=True,
        timeout=120,
        env={"AWS_DEFAULT_REGION": "eu-west-1", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded: dict[str, str | None] = json.loads(result.stdout.splitlines()[-1])
    return loaded


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {source: _bundle(source, tmp_path_factory.mktemp(source)) for source in FUNCTIONS}


def test_the_dev_kit_prefixes_are_module_or_package_paths_that_exist() -> None:
    for prefix in DEV_KIT:
        path = ROOT / prefix
        assert path.is_dir() or (path.suffix == ".py" and path.is_file()), prefix


def test_a_path_is_dev_kit_by_prefix() -> None:
    assert is_dev_kit(PurePosixPath("shared/local"))
    assert is_dev_kit(PurePosixPath("shared/local/aws_mode/__init__.py"))
    assert is_dev_kit(PurePosixPath("shared/adapters/embedded/send_ledger.py"))
    assert is_dev_kit(PurePosixPath("shared/cli/memory.py"))
    assert not is_dev_kit(PurePosixPath("shared/localisation.py"))
    assert not is_dev_kit(PurePosixPath("shared/adapters/aws/dynamodb.py"))
    assert not is_dev_kit(PurePosixPath("shared/consolidation/runner.py"))


def test_every_module_importing_a_dev_kit_library_is_in_the_dev_kit() -> None:
    # The prefixes are the definition of the dev kit: a module outside them that imports the dev
    # kit's libraries would ship to Lambda and fail there.
    outside = []
    for path in (ROOT / "shared").rglob("*.py"):
        relative = PurePosixPath(path.relative_to(ROOT).as_posix())
        if is_dev_kit(relative):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                else []
            )
            outside += [f"{relative}: {n}" for n in names if n.split(".")[0] in DEV_KIT_MODULES]
    assert outside == []


@pytest.mark.parametrize("source", FUNCTIONS)
def test_a_function_bundle_holds_no_dev_kit_path(bundles: dict[str, Path], source: str) -> None:
    bundle = bundles[source]
    shipped = [PurePosixPath(p.relative_to(bundle).as_posix()) for p in bundle.rglob("*")]

    assert (bundle / "handler.py").is_file()
    assert (bundle / "shared" / "cloud.py").is_file()
    assert (bundle / "shared" / "adapters" / "aws" / "__init__.py").is_file()
    assert [p for p in shipped if is_dev_kit(p)] == []
    assert not (bundle / "shared" / "local").exists()
    assert not (bundle / "shared" / "cli.py").exists()
    assert not (bundle / "shared" / "adapters" / "embedded").exists()
    # The redaction filter's rule set is data beside its module
    assert (bundle / "shared" / "safety" / "rules" / "gitleaks.toml").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("source", FUNCTIONS)
def test_a_handler_imports_from_its_bundle_with_only_the_layers_packages(
    bundles: dict[str, Path], source: str
) -> None:
    module = HANDLER.split(".")[0]
    loaded = _import_in_fresh_python(bundles[source], module)

    assert loaded[module] == str(bundles[source] / f"{module}.py")
    assert loaded["shared"] == str(bundles[source] / "shared" / "__init__.py")
    assert not {m.split(".")[0] for m in loaded} & DEV_KIT_MODULES


@pytest.mark.slow
def test_every_shipped_module_imports_with_only_the_layers_packages(bundles: dict[str, Path]) -> None:
    bundle = bundles["agent"]
    modules = sorted(
        ".".join(p.relative_to(bundle).with_suffix("").parts).removesuffix(".__init__")
        for p in (bundle / "shared").rglob("*.py")
    )
    loaded = _import_in_fresh_python(bundle, *modules)

    assert set(modules) <= set(loaded)


@pytest.mark.slow
def test_the_mcp_client_imports_with_the_layers_packages_and_without_click(bundles: dict[str, Path]) -> None:
    loaded = _import_in_fresh_python(bundles["agent"], "httpx", *MCP_CLIENT, allowed=MCP_SDK_DEPENDENCIES)

    assert set(MCP_CLIENT) <= set(loaded)
    # httpx imports its command line, and so click, whenever click is importable: out of the
    # layer (layers/overrides.txt leaves out uvicorn, its only reason), a cold import skips it.
    assert "click" not in loaded


@pytest.mark.slow
def test_the_redaction_rule_set_loads_from_the_bundle_with_the_layers_re2(bundles: dict[str, Path]) -> None:
    bundle = bundles["agent"]
    token = "dp.pt." + "Xq7k2Lm9Pz4Rt8Vw1Ny6Bc3Hd5Jf0Gs2Qa7Ue4Io9Kx"
    script = (
        "import sys; sys.path[:0] = [sys.argv[1]]; sys.path.append(sys.argv[2])\n"
        "from shared.safety import redact, ruleset\n"
        "print(ruleset.RULES_FILE, redact.redact(sys.argv[3], pii=False).text)\n"
    )
    site = sysconfig.get_paths()["purelib"]
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script, str(bundle), site, f"token {token} here"],
        check=True,
        cwd=bundle,
        capture_output=True,
        text=True,
        timeout=120,
    )
    path, text = result.stdout.strip().split(" ", 1)
    assert path == str(bundle / "shared" / "safety" / "rules" / "gitleaks.toml")
    assert text == "token [REDACTED:doppler_api_token] here"


def test_the_layer_lock_holds_the_cloud_core_alone() -> None:
    locked = _layer_distributions()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_normalise(re.split(r"[<>=!~\[; ]", r)[0]) for r in project["dependencies"]}
    local = {_normalise(re.split(r"[<>=!~\[; ]", r)[0]) for r in project["optional-dependencies"]["local"]}

    assert core <= locked
    # The official MCP SDK (shared.tools.mcp) imports its server half, and so Starlette, when it
    # is imported: it ships in the layer for it alone (the lock says "via mcp"), and no module of
    # ours imports it (the import contracts and the checks above). Uvicorn (and click with it),
    # which the SDK requires to run servers, is left out (layers/overrides.txt).
    assert locked & DEV_KIT_DISTRIBUTIONS <= MCP_SDK_DEPENDENCIES
    assert locked & local <= MCP_SDK_DEPENDENCIES
    # opensearch-py's gRPC transport, which the REST client never imports (layers/overrides.txt).
    assert not locked & {"grpcio", "protobuf", "opensearch-protobufs", "uvicorn", "click"}
    assert {"typer", "starlette", "uvicorn", "apsw", "sqlite-vec"} <= local
    assert not core & DEV_KIT_DISTRIBUTIONS


def test_the_layer_is_built_with_the_pinned_uv() -> None:
    build = (ROOT / "layers" / "build.py").read_text()
    pinned = re.search(r'^UV_VERSION = "([^"]+)"', build, re.M)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())

    assert pinned is not None
    assert f"uv=={pinned[1]}" in pyproject["dependency-groups"]["dev"]
    assert f'"uv=={pinned[1]}"' in (ROOT / "Makefile").read_text()


# What a plain turn (a text message, no command, no file, the default gate off, an OpenAI-style
# model) never uses, and the agent's cold import therefore leaves for the turn that does
# (docs/cost.md#cold-starts): each is loaded where it is first needed.
NOT_AT_AGENT_IMPORT = (
    "httpx",  # the first platform reply or file download
    "filetype",  # a file's type, sniffed when one arrives
    "pydantic_settings",  # Settings reads the environment itself
    "aws_lambda_powertools.utilities.parser.models",  # every event source's models; the lane record is ours
    "shared.agent.commands",
    "shared.agent.gate",
    "shared.media.platforms",
    "shared.media.extract",
    "shared.providers.anthropic",
    "shared.providers.bedrock",
    "openai",  # the provider's SDK, with the provider (the first turn)
    "opensearchpy",
)


@pytest.mark.slow
def test_the_agents_cold_import_leaves_what_a_plain_turn_never_uses(bundles: dict[str, Path]) -> None:
    loaded = _import_in_fresh_python(bundles["agent"], HANDLER.split(".")[0])

    assert "shared.agent.turn" in loaded  # the turn itself is imported, not deferred
    assert [m for m in NOT_AT_AGENT_IMPORT if m in loaded] == []
