"""What the infra tests share: one synthesised stage, and how to find a construct in its template."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import App, CfnElement, Stack
from aws_cdk.assertions import Template
from constructs import Construct

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


def logical_id(construct: Construct) -> str:
    child = construct.node.default_child
    assert isinstance(child, CfnElement)
    return Stack.of(construct).get_logical_id(child)


def ref_or_getatt_target(value: dict[str, Any]) -> str:
    """The logical id a {"Ref": id} or {"Fn::GetAtt": [id, attr]} points at."""
    if "Ref" in value:
        return str(value["Ref"])
    return str(value["Fn::GetAtt"][0])
