"""Bedrock chat models: the one action ConverseStream needs, on exactly the configured model.

shared.providers.bedrock calls `converse_stream` with SIGIL_MODEL's model id, which Bedrock
authorises as bedrock:InvokeModelWithResponseStream on the resource that id names. That id is
either a foundation model (`anthropic.claude-...`), or a system-defined cross-Region inference
profile (`us.anthropic.claude-...`, `global.anthropic.claude-...`), which routes each request to
the same foundation model in one of the Regions of its geography (or, for `global.`, any
commercial Region) and needs a grant on the profile and on the model in every Region it routes
to. Bedrock has no grant_* of its own, so these are the statements one would write by hand.
"""

from __future__ import annotations

from aws_cdk import Aws, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_

from infra.constructs.nag import acknowledge

# ConverseStream is authorised as this action alone (the Bedrock API reference); the agent and
# the consolidator never call Converse or InvokeModel on a chat model.
CHAT_ACTIONS = ["bedrock:InvokeModelWithResponseStream"]
# The prefixes of system-defined cross-Region inference profiles; a foundation model id starts with
# its provider (amazon., anthropic., meta., ...), never with one of these.
PROFILE_GEOGRAPHIES = frozenset({"us", "us-gov", "eu", "apac", "jp", "au", "ca", "global"})


def profile_geography(model_id: str) -> str | None:
    """The geography of a cross-Region inference profile id, or None for a foundation model id."""
    prefix, dot, rest = model_id.partition(".")
    return prefix if dot and rest and prefix in PROFILE_GEOGRAPHIES else None


def grant_chat_model(function: lambda_.Function, model_id: str) -> None:
    """InvokeModelWithResponseStream on this one Bedrock model (and, for a profile, its routes)."""
    if model_id.startswith("arn:"):
        # An application inference profile or provisioned throughput ARN hides which foundation
        # models it routes to, so no grant can name them; refuse rather than deploy a dead agent.
        raise ValueError(
            f"model bedrock/{model_id}: give a foundation model id (anthropic.claude-...) or a "
            "cross-Region inference profile id (us.anthropic.claude-...), not an ARN"
        )
    stack = Stack.of(function)
    geography = profile_geography(model_id)
    if geography is None:
        model_arn = stack.format_arn(
            service="bedrock", account="", resource="foundation-model", resource_name=model_id
        )
        function.add_to_role_policy(iam.PolicyStatement(actions=CHAT_ACTIONS, resources=[model_arn]))
        return
    foundation_model = model_id.removeprefix(f"{geography}.")
    profile_arn = stack.format_arn(service="bedrock", resource="inference-profile", resource_name=model_id)
    function.add_to_role_policy(iam.PolicyStatement(actions=CHAT_ACTIONS, resources=[profile_arn]))
    # The profile's destination Regions are AWS's to extend, so the model is named in every Region;
    # the condition admits it only when the request came through this one profile, so the role
    # still cannot call the model directly, in this Region or any other.
    routed = [f"arn:{Aws.PARTITION}:bedrock:*::foundation-model/{foundation_model}"]
    if geography == "global":
        # A global profile's requests reach the model under its Region-less ARN.
        routed.append(f"arn:{Aws.PARTITION}:bedrock:::foundation-model/{foundation_model}")
    function.add_to_role_policy(
        iam.PolicyStatement(
            actions=CHAT_ACTIONS,
            resources=routed,
            conditions={"StringEquals": {"bedrock:InferenceProfileArn": profile_arn}},
        )
    )
    assert function.role is not None  # every SigilFunction has a role of its own
    acknowledge(
        function.role,
        f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:bedrock:*::foundation-model/{foundation_model}]",
        PROFILE_REASON,
    )


# docs/cdk-nag.md quotes this reason (tests/infra checks it word for word).
PROFILE_REASON = (
    "A cross-Region inference profile routes each request to the same foundation model in one of "
    "the Regions AWS lists for it, and AWS may add Regions; the model is named in every Region, "
    "and only through the configured profile (bedrock:InferenceProfileArn)."
)
