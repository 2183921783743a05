"""The CDK app: `npx cdk synth -c stage=dev` (cdk.json runs `python -m infra.app` from the repo root).

Synth is offline: the stack is environment-agnostic (no account or region lookups, no STS call),
function code is bundled on this machine, and the dependency layer is whatever `make layer` built.
"""

from __future__ import annotations

if not __package__:
    # `python infra/app.py` puts infra/ first on sys.path, where infra/constructs would shadow
    # the `constructs` library: run it as a module from the repository root instead.
    raise SystemExit("run from the repository root: .venv/bin/python -m infra.app")

from collections.abc import Mapping
from typing import Any

from aws_cdk import App, Validations
from cdk_nag import AwsSolutionsChecks

from infra.config import read_context
from infra.constructs.function import LayerNotReady
from infra.stack import SigilStack


def build_app(
    context: Mapping[str, Any] | None = None, *, outdir: str | None = None
) -> tuple[App, SigilStack]:
    """The app with its one stack for the stage in context, and cdk-nag's AwsSolutions pack."""
    app = App(context=dict(context or {}), outdir=outdir)
    ctx = read_context(app.node)
    stack = SigilStack(
        app,
        f"Sigil-{ctx.stage.name}",
        context=ctx,
        description=f"Sigil AI agent gateway ({ctx.stage.name})",
    )
    # cdk-nag 3: the pack runs as a policy-validation plugin during synth; a finding that is not
    # acknowledged fails synth, and the report lands in the cloud assembly. The acknowledgements
    # are also written into each resource's Metadata (cdk_nag.rules_to_suppress), an audit trail
    # that travels with the template.
    Validations.of(app).add_plugins(
        AwsSolutionsChecks(app, verbose=True, write_suppressions_to_cloud_formation=True)
    )
    return app, stack


def main() -> None:
    try:
        app, _ = build_app()
    except LayerNotReady as problem:
        # One line that says what to do: cdk prints whatever the app writes, traceback included.
        raise SystemExit(f"sigil synth: {problem}") from None
    app.synth()


if __name__ == "__main__":
    main()
