"""What the infra tests share: one synthesised stage, and how to find a construct in its template."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import App, CfnElement, Stack
from aws_cdk.assertions import Template
from constructs import Construct

from infra.app import build_app
from infra.config import ROOT
from infra.stack import SigilStack


@dataclass(frozen=True)
class Synth:
    stage: str
    app: App
    stack: SigilStack
    outdir: Path
    template: Template
    raw: dict[str, Any]

    def resources(self, type_: str) -> dict[str, dict[str, Any]]:
        return {k: r for k, r in self.raw["Resources"].items() if r["Type"] == type_}

    def validation_report(self) -> dict[str, Any]:
        path = self.outdir / "validation-report.json"
        # Nothing is written when no validation plugin has anything to say.
        return json.loads(path.read_text()) if path.exists() else {"pluginReports": []}


def synthesize(stage: str, outdir: Path, layer: Path, **values: str) -> Synth:
    """The stage synthesised as `npx cdk synth` would (cdk.json's feature flags), with `values`
    as extra context and the stand-in layer. cdk-nag findings go to validation-report.json
    instead of raising, so that the nag test can show them and the other tests still run."""
    context = {
        **json.loads((ROOT / "cdk.json").read_text())["context"],
        "stage": stage,
        **values,
        "layer_dir": str(layer),
        "@aws-cdk/core:failSynthOnValidationErrors": False,
    }
    app, stack = build_app(context, outdir=str(outdir))
    app.synth()
    template = Template.from_stack(stack)
    return Synth(stage, app, stack, outdir, template, template.to_json())


def logical_id(construct: Construct) -> str:
    child = construct.node.default_child
    assert isinstance(child, CfnElement)
    return Stack.of(construct).get_logical_id(child)


def ref_or_getatt_target(value: dict[str, Any]) -> str:
    """The logical id a {"Ref": id} or {"Fn::GetAtt": [id, attr]} points at."""
    if "Ref" in value:
        return str(value["Ref"])
    return str(value["Fn::GetAtt"][0])


def string_like(pattern: str, value: str) -> bool:
    """IAM's StringLike: `*` any run of characters ("#" included), `?` one character."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


def statements_on(synth: Synth, role_owner: Any, resource: Any) -> list[dict[str, Any]]:
    """The IAM statements of `role_owner`'s role (a construct with `handler`) that name `resource`."""
    target = logical_id(resource)
    return [
        statement
        for policy in synth.resources("AWS::IAM::Policy").values()
        if {"Ref": logical_id(role_owner.handler.role)} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if target in json.dumps(statement["Resource"])
    ]
