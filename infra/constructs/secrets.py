"""Secrets Manager secrets: channel signing secrets and bot tokens, LLM API keys, all under `sigil/`.

The stack creates every secret with a random value, so that nothing secret ever passes through
CloudFormation or this repository: a value the platform issues (a bot token, a signing secret)
is put in afterwards with `aws secretsmanager put-secret-value` (docs/deploy.md), and until then
the random value simply fails verification. Values Sigil chooses itself (the web signing secret,
Telegram's webhook secret token, WhatsApp's verify token) can stay random.

A function reads a secret as `SIGIL_SECRETS_PREFIX + key`, e.g. "sigil/" + "slack/signing-secret".
"""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.constructs.nag import acknowledge
from shared.config import CHANNEL_TOKENS, INGRESS_SECRETS, LLM_KEY_OF, LLM_KEYS, SecretSpec

DEFAULT_PREFIX = "sigil/"


def llm_keys(providers: Iterable[str]) -> list[str]:
    """The keys of these providers' API key secrets; a provider without one (Bedrock) has none."""
    return [LLM_KEY_OF[p].key for p in sorted(providers) if p in LLM_KEY_OF]


def web_secret(workspace: str) -> SecretSpec:
    # The key shared.channels.web.secret_name() reads: one HMAC signing secret per workspace.
    return SecretSpec(f"web/{workspace}", f"Web channel: the HMAC signing secret of workspace {workspace}")


class Secrets(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        web_workspaces: Iterable[str],
        removal_policy: RemovalPolicy,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        super().__init__(scope, construct_id)
        self.prefix = prefix
        self.web_keys = tuple(web_secret(w).key for w in web_workspaces)
        specs = (*INGRESS_SECRETS, *CHANNEL_TOKENS, *LLM_KEYS, *(web_secret(w) for w in web_workspaces))
        self.secrets: dict[str, secretsmanager.Secret] = {}
        for spec in specs:
            self.secrets[spec.key] = secretsmanager.Secret(
                self,
                # Keys are unique and hold no "/" once replaced, so neither do the construct ids.
                spec.key.replace("/", "-"),
                secret_name=prefix + spec.key,
                description=spec.description,
                generate_secret_string=secretsmanager.SecretStringGenerator(
                    # Letters and digits only: valid as a Telegram secret_token and in any header.
                    exclude_punctuation=True,
                    password_length=48,
                ),
                removal_policy=removal_policy,
            )
        acknowledge(
            self,
            "AwsSolutions-SMG4",
            "These values are issued by Slack, Telegram, Discord, Meta and the LLM providers, or are "
            "registered with them (webhook secret, verify token, web signing secret); a rotation "
            "Lambda cannot change them on the platform's side, so they are rotated there by hand.",
        )

    def grant_read(self, grantee: iam.IGrantable, keys: Iterable[str]) -> None:
        """secretsmanager:GetSecretValue/DescribeSecret on exactly these secrets, and no others."""
        for key in keys:
            self.secrets[key].grant_read(grantee)
