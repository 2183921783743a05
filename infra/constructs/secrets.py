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
from dataclasses import dataclass

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.constructs.nag import acknowledge

DEFAULT_PREFIX = "sigil/"


@dataclass(frozen=True)
class SecretSpec:
    key: str
    description: str


# Read by the webhook: what it needs to verify a request before anything is queued.
INGRESS_SECRETS = (
    SecretSpec(
        "telegram/webhook-secret", "Telegram: the secret_token given to setWebhook (Sigil chooses it)"
    ),
    SecretSpec("slack/signing-secret", "Slack: the app's Signing Secret (Basic Information page)"),
    SecretSpec("discord/public-key", "Discord: the application's public key (hex), for Ed25519 checks"),
    SecretSpec("whatsapp/app-secret", "WhatsApp: the Meta app secret, for X-Hub-Signature-256"),
    SecretSpec(
        "whatsapp/verify-token", "WhatsApp: the verify token of the webhook handshake (Sigil chooses it)"
    ),
)
# Read by the agent: what it needs to answer on each channel.
CHANNEL_TOKENS = (
    SecretSpec("telegram/bot-token", "Telegram: the bot token from BotFather"),
    SecretSpec("slack/bot-token", "Slack: the bot user OAuth token (xoxb-...)"),
    SecretSpec("discord/bot-token", "Discord: the bot token"),
    SecretSpec("whatsapp/access-token", "WhatsApp: the Cloud API access token"),
)
# Read by the agent and the consolidator, each only its providers' (shared.config.KEY_PROVIDERS):
# the LLM providers reached with an API key (and OpenAI's embeddings).
LLM_KEY_OF = {
    "openai": SecretSpec("llm/openai-api-key", "OpenAI (or an OpenAI-compatible endpoint): the API key"),
    "anthropic": SecretSpec("llm/anthropic-api-key", "Anthropic: the API key"),
}
LLM_KEYS = tuple(LLM_KEY_OF.values())


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
