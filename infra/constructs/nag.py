"""cdk-nag acknowledgements: each one names its rule (or finding) and says why, next to its cause.

docs/cdk-nag.md lists every acknowledgement with its reason; tests/infra checks the list against
what the synthesised app records, so neither can change without the other.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge `rule` on `scope` and everything below it.

    `rule` is a rule id ("AwsSolutions-SQS3") or one finding of a granular rule
    ("AwsSolutions-IAM5[Resource::*]").
    """
    if len(reason.split()) < 8:
        # A reason is for the next reader: a few words ("not needed") explain nothing.
        raise ValueError(f"the reason for acknowledging {rule} must say why, in a sentence")
    Validations.of(scope).acknowledge(Acknowledgment(id=rule, reason=reason))
