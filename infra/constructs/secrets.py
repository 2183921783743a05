"""Secrets Manager secrets: channel signing secrets and bot tokens, LLM and tool API keys, all under `sigil/`.

The stack creates every secret with a random value, so that nothing secret ever passes through
CloudFormation or this repository: a value the platform issues (a bot token, a signing secret)
is put in afterwards with `aws secretsmanager put-secret-value` (docs/deploy.md), and until then
the random value simply fails verification. Values Sigil chooses itself (the web signing secret,
Telegram's webhook secret token, WhatsApp's verify token) can stay random.

A function reads a secret as `SIGIL_SECRETS_PREFIX + key`, e.g. "sigil/" + "slack/signing-secret".

A named channel route's secrets (shared.models.ChannelRoute: `telegram/family/bot-token`) are not
created here: routes are configuration (`sigil config apply`), not stack resources, and their
values are put with `sigil secret set --stack`. `grant_read_routes` grants them by name pattern,
one platform key at a time, so a function reads the same keys under any route and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.constructs.nag import acknowledge
from shared.config import CHANNEL_TOKENS, INGRESS_SECRETS, LLM_KEY_OF, LLM_KEYS, TOOL_KEYS, SecretSpec

DEFAULT_PREFIX = "sigil/"
# Secrets Manager appends "-" and six random characters to a secret's name in its ARN.
ARN_SUFFIX = "-??????"
# docs/cdk-nag.md quotes this reason (tests/infra checks it word for word).
ROUTE_SECRETS_REASON = (
    "Channel routes are configuration applied after deploy, each bot with its own secrets under "
    "its route's name; the grant names one platform key under any route name and nothing else."
)


def route_secret_pattern(prefix: str, key: str) -> str:
    """The names of `key` ("telegram/bot-token") under every route: "sigil/telegram/*/bot-token"."""
    platform, _, rest = key.partition("/")
    return f"{prefix}{platform}/*/{rest}"


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
        created: Iterable[str] | None = None,
    ) -> None:
        """`created`: None creates every secret of the catalogue; otherwise the web signing
        secrets and these keys only (a stage's `all_secrets=False`, docs/cost.md#the-floors). The
        others are then granted by name (`grant_read`) and created by `sigil secret set --stack`
        when a channel is set up; until then a read finds none, which fails like a wrong value."""
        super().__init__(scope, construct_id)
        self.prefix = prefix
        self.web_keys = tuple(web_secret(w).key for w in web_workspaces)
        specs = (
            *INGRESS_SECRETS,
            *CHANNEL_TOKENS,
            *LLM_KEYS,
            *TOOL_KEYS,
            *(web_secret(w) for w in web_workspaces),
        )
        self.secrets: dict[str, secretsmanager.Secret] = {}
        # What grant_read may name: a key outside the catalogue is a mistake, created or not.
        self._catalogue = frozenset(spec.key for spec in specs)
        if created is not None:
            keep = {*created, *self.web_keys}
            specs = tuple(spec for spec in specs if spec.key in keep)
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
            "These values are issued by Slack, Telegram, Discord, Meta, the LLM providers and Brave, or are "
            "registered with them (webhook secret, verify token, web signing secret); a rotation "
            "Lambda cannot change them on the platform's side, so they are rotated there by hand.",
        )

    def grant_read(self, grantee: iam.IGrantable, keys: Iterable[str]) -> None:
        """secretsmanager:GetSecretValue/DescribeSecret on exactly these secrets, and no others:
        the stack's own by reference, one it did not create by its name (the ARN's random
        suffix as "-??????", which matches no other name)."""
        by_name = []
        for key in keys:
            if key in self.secrets:
                self.secrets[key].grant_read(grantee)
            elif key in self._catalogue:
                by_name.append(key)
            else:
                raise KeyError(f"{key!r} is not a secret of the catalogue (shared.config)")
        if by_name:
            stack = Stack.of(self)
            grantee.grant_principal.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
                    resources=[
                        stack.format_arn(
                            service="secretsmanager",
                            resource="secret",
                            resource_name=self.prefix + key + ARN_SUFFIX,
                            arn_format=ArnFormat.COLON_RESOURCE_NAME,
                        )
                        for key in by_name
                    ],
                )
            )

    def grant_read_routes(self, function: lambda_.Function, keys: Iterable[str]) -> None:
        """The same actions on these keys of every named route (`route_secret_pattern`).

        `*` in an IAM resource also spans "/", so a name must still end in the key: a grant for
        telegram's bot token under any route never reaches its webhook secret, or another platform.
        """
        patterns = [route_secret_pattern(self.prefix, key) + ARN_SUFFIX for key in keys]
        stack = Stack.of(self)
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
                resources=[
                    stack.format_arn(
                        service="secretsmanager",
                        resource="secret",
                        resource_name=pattern,
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    )
                    for pattern in patterns
                ],
            )
        )
        assert function.role is not None  # every SigilFunction has a role of its own
        for pattern in patterns:
            acknowledge(
                function.role,
                "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:<AWS::Region>:"
                f"<AWS::AccountId>:secret:{pattern}]",
                ROUTE_SECRETS_REASON,
            )
