"""A deployed Sigil stack as `sigil --stack` finds it: moto's tables, queue and bus, and a
CloudFormation stack on moto whose outputs name them, as infra/stack.py's outputs do."""

from __future__ import annotations

import contextlib
import json
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass

import boto3

from tests.support import moto_aws

REGION = moto_aws.REGION


@dataclass(frozen=True)
class MotoStack:
    name: str
    resources: moto_aws.AwsResources

    def args(self) -> list[str]:
        return ["--stack", self.name, "--region", REGION]


def outputs(resources: moto_aws.AwsResources) -> dict[str, str]:
    return {
        "SessionsTable": resources.sessions_table,
        "MemoryTable": resources.memory_table,
        "TurnsQueueUrl": resources.queue_url,
        "EventBusName": resources.event_bus_name,
        # Never contacted by these commands: the index client is built on first use.
        "SearchEndpoint": "search.invalid",
        "SecretsPrefix": resources.secrets_prefix,
        "SkillsBucket": resources.skills_bucket,
        "MediaBucket": resources.media_bucket,
    }


def create_stack(name: str, values: dict[str, str]) -> None:
    """A stack of one placeholder resource and the given outputs (moto evaluates the template)."""
    template = {
        "Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {key: {"Value": value} for key, value in values.items()},
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=name, TemplateBody=json.dumps(template)
    )


@contextlib.contextmanager
def moto_stack(directory: pathlib.Path) -> Iterator[MotoStack]:
    """moto for the block, with a stack named after `directory` (see moto_aws.persistent_mock)."""
    with moto_aws.persistent_mock(), moto_aws.moto_like_aws():
        stem = moto_aws.name_for(directory)
        resources = moto_aws.provision(stem)
        name = f"sigil-{stem}"
        create_stack(name, outputs(resources))
        yield MotoStack(name, resources)
