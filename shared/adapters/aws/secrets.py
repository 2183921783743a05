"""SecretStore over Secrets Manager through powertools' parameters utility (cached reads).

A provider instance per store, built on the cached client factory, rather than the module-level
`get_secret`: that one keeps a process-wide provider whose client is built on first use, so it
would neither follow AWS_ENDPOINT_URL set later nor start fresh under a new moto mock.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from aws_lambda_powertools.utilities.parameters import SecretsProvider
from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError
from botocore.exceptions import ClientError

from shared.adapters.aws import clients

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager.client import SecretsManagerClient

log = logging.getLogger("sigil.secrets")

# Long enough that a warm Lambda does not call Secrets Manager on every webhook, short enough
# that a rotated signing secret is picked up within minutes.
DEFAULT_MAX_AGE_S: Final = 300


class SecretsManagerStore:
    def __init__(
        self,
        prefix: str,
        *,
        client: SecretsManagerClient | None = None,
        region: str | None = None,
        max_age_s: int = DEFAULT_MAX_AGE_S,
    ) -> None:
        self.prefix = prefix
        self.max_age_s = max_age_s
        self.provider = SecretsProvider(
            boto3_client=client if client is not None else clients.secretsmanager(region)
        )

    def get(self, name: str) -> str | None:
        try:
            value = self.provider.get(self.prefix + name, max_age=self.max_age_s)
        except GetParameterError as exc:
            # powertools wraps every failure; the SDK error it caught is the exception's context.
            cause = exc.__context__
            if isinstance(cause, ClientError) and cause.response.get("Error", {}).get("Code") == (
                "ResourceNotFoundException"
            ):
                log.debug("secret not found", extra={"secret": self.prefix + name})
                return None
            raise
        if isinstance(value, bytes):
            return value.decode()
        if isinstance(value, str):
            return value
        # No transform is requested, so powertools returns the SecretString or SecretBinary.
        raise TypeError(f"unexpected secret value type {type(value).__name__} for {self.prefix + name}")

    # The operator's side (`sigil secret --stack`): never called by a function, whose role can
    # only read (infra/constructs/secrets.py).

    def _client(self) -> SecretsManagerClient:
        client: SecretsManagerClient = self.provider.client
        return client

    def set(self, name: str, value: str) -> None:
        """Store a value: a new version of the secret, or the secret itself when it is not there."""
        client = self._client()
        try:
            client.put_secret_value(SecretId=self.prefix + name, SecretString=value)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            client.create_secret(Name=self.prefix + name, SecretString=value)
        self.provider.clear_cache()  # type: ignore[no-untyped-call]

    def delete(self, name: str) -> None:
        """Schedule the secret's deletion, with Secrets Manager's shortest recovery window (7 days:
        `aws secretsmanager restore-secret` undoes it)."""
        self._client().delete_secret(SecretId=self.prefix + name, RecoveryWindowInDays=7)
        self.provider.clear_cache()  # type: ignore[no-untyped-call]

    def names(self) -> list[str]:
        """The names under the prefix, without it, sorted; those scheduled for deletion left out."""
        found: list[str] = []
        for page in (
            self._client()
            .get_paginator("list_secrets")
            .paginate(Filters=[{"Key": "name", "Values": [self.prefix]}])
        ):
            for entry in page.get("SecretList", []):
                full = entry.get("Name", "")
                if full.startswith(self.prefix) and "DeletedDate" not in entry:
                    found.append(full.removeprefix(self.prefix))
        return sorted(found)
