"""What differs between stages, read once from CDK context (`-c stage=dev|prod`, ...).

Everything else about the stack is the same in every stage, so a dev deploy exercises the same
wiring as prod; only sizes, retention and what happens to data on stack deletion change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import RemovalPolicy
from aws_cdk import aws_logs as logs
from constructs import Node

from shared.models import ID_PATTERN

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LAYER_DIR = ROOT / "layers" / "build"
# Titan Text Embeddings v2 (1024 dimensions): in the stack's region, no key to manage.
DEFAULT_EMBEDDING_MODEL = "bedrock/amazon.titan-embed-text-v2:0"


@dataclass(frozen=True)
class SearchSizing:
    data_nodes: int
    data_instance: str
    volume_gib: int
    # 0 means no dedicated master nodes; zone awareness needs at least 2 availability zones.
    master_nodes: int = 0
    master_instance: str | None = None
    availability_zones: int = 1


@dataclass(frozen=True)
class StageConfig:
    name: str
    log_retention: logs.RetentionDays
    # What stack deletion does to tables, the search domain's log groups and secrets.
    removal_policy: RemovalPolicy
    search: SearchSizing


STAGES: dict[str, StageConfig] = {
    "dev": StageConfig(
        name="dev",
        log_retention=logs.RetentionDays.TWO_WEEKS,
        removal_policy=RemovalPolicy.DESTROY,
        # One small node: enough for BM25 and lucene k-NN over a developer's memory.
        search=SearchSizing(data_nodes=1, data_instance="t3.medium.search", volume_gib=10),
    ),
    "prod": StageConfig(
        name="prod",
        log_retention=logs.RetentionDays.THREE_MONTHS,
        removal_policy=RemovalPolicy.RETAIN,
        # One data node per zone across three zones, and three dedicated masters, so losing a zone
        # or a master keeps the cluster writable and the index available.
        search=SearchSizing(
            data_nodes=3,
            data_instance="r7g.large.search",
            volume_gib=50,
            master_nodes=3,
            master_instance="m7g.large.search",
            availability_zones=3,
        ),
    ),
}


@dataclass(frozen=True)
class AppContext:
    stage: StageConfig
    layer_dir: Path
    # Each workspace that talks over the web channel has its own signing secret (sigil/web/{id}).
    web_workspaces: tuple[str, ...]
    # SIGIL_MODEL for the agent and the consolidator; None leaves the model unset, and the agent
    # then answers that no model is configured instead of inventing a reply. A "bedrock/<model>"
    # value also gives both functions InvokeModelWithResponseStream on that model alone
    # (infra.constructs.bedrock).
    model: str | None
    # Where the functions look up secrets (SIGIL_SECRETS_PREFIX). Secret names are per account and
    # region, so a second stage in the same account and region needs its own, e.g. "sigil/dev/".
    secrets_prefix: str
    # SIGIL_EMBEDDING_MODEL for the agent and the consolidator (shared.memory.embeddings). A
    # "bedrock/<model>" value also gives both functions bedrock:InvokeModel on that model alone.
    embedding_model: str = DEFAULT_EMBEDDING_MODEL


def read_context(node: Node) -> AppContext:
    stage_name = str(node.try_get_context("stage") or "dev")
    if stage_name not in STAGES:
        raise ValueError(f"unknown stage {stage_name!r}: use -c stage=dev or -c stage=prod")
    layer_dir = Path(str(node.try_get_context("layer_dir") or DEFAULT_LAYER_DIR))
    raw_workspaces = node.try_get_context("web_workspaces") or "default"
    if isinstance(raw_workspaces, str):
        raw_workspaces = raw_workspaces.split(",")
    workspaces = tuple(w.strip() for w in raw_workspaces if w.strip())
    bad = [w for w in workspaces if not re.match(ID_PATTERN, w)]
    if bad or not workspaces:
        raise ValueError(f"web_workspaces must be workspace ids ({ID_PATTERN}), got {raw_workspaces!r}")
    model = node.try_get_context("model")
    secrets_prefix = str(node.try_get_context("secrets_prefix") or "sigil/")
    if not secrets_prefix.startswith("sigil/") or not secrets_prefix.endswith("/"):
        raise ValueError(f"secrets_prefix must start with 'sigil/' and end with '/', got {secrets_prefix!r}")
    return AppContext(
        stage=STAGES[stage_name],
        layer_dir=layer_dir if layer_dir.is_absolute() else ROOT / layer_dir,
        web_workspaces=workspaces,
        model=str(model) if model else None,
        secrets_prefix=secrets_prefix,
        embedding_model=str(node.try_get_context("embedding_model") or DEFAULT_EMBEDDING_MODEL),
    )
