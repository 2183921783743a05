"""What the infra tests share: one synthesised stage, and how to find a construct in its template."""

from __future__ import annotations

import json
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


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def role_statements(synth: Synth, role_owner: Any) -> list[dict[str, Any]]:
    """Every statement of the IAM policies attached to `role_owner`'s function role."""
    role = {"Ref": logical_id(role_owner.handler.role)}
    return [
        statement
        for policy in synth.resources("AWS::IAM::Policy").values()
        if role in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def secret_grants(synth: Synth, role_owner: Any) -> tuple[set[str], set[str]]:
    """What a role may read of Secrets Manager: (the keys of the stack's secrets it references,
    the names it is granted by ARN, each as `<name>-??????`: named routes' patterns, and in a stage
    without `all_secrets` the catalogue's secrets the stack did not create)."""
    secret_ids = {logical_id(s): key for key, s in synth.stack.secrets.secrets.items()}
    referenced: set[str] = set()
    names: set[str] = set()
    for statement in role_statements(synth, role_owner):
        if "secretsmanager:GetSecretValue" not in _as_list(statement["Action"]):
            continue
        for r in _as_list(statement["Resource"]):
            if "Fn::Join" in r:
                parts = r["Fn::Join"][1]
                # arn:<partition>:secretsmanager:<region>:<account>:secret:<name>-??????
                assert parts[-2:-1] == [{"Ref": "AWS::AccountId"}] and parts[-1].startswith(":secret:")
                names.add(parts[-1].removeprefix(":secret:"))
            else:
                referenced.add(secret_ids[ref_or_getatt_target(r)])
    return referenced, names


def granted_secrets(synth: Synth, role_owner: Any) -> set[str]:
    """The keys of the secrets a role may read, whether the stack created them (granted by
    reference) or not (granted by their exact name, created later by `sigil secret set`)."""
    referenced, names = secret_grants(synth, role_owner)
    prefix = synth.stack.secrets.prefix
    exact = {n.removeprefix(prefix).removesuffix("-??????") for n in names if "*" not in n}
    # Never both: a secret the stack created is granted by reference alone.
    assert not referenced & exact
    return referenced | exact


def logical_id(construct: Construct) -> str:
    child = construct.node.default_child
    assert isinstance(child, CfnElement)
    return Stack.of(construct).get_logical_id(child)


def ref_or_getatt_target(value: dict[str, Any]) -> str:
    """The logical id a {"Ref": id} or {"Fn::GetAtt": [id, attr]} points at."""
    if "Ref" in value:
        return str(value["Ref"])
    return str(value["Fn::GetAtt"][0])
