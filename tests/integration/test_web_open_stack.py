"""`sigil web open --stack` and `sigil web token --stack`: the deployed page's URL (the stack's ApiUrl
output) with a token signed under the deployed workspace's web secret, read with your credentials."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shared.adapters.aws import clients
from shared.channels import web, web_tokens
from shared.cli import app
from tests.support.moto_stack import REGION, MotoStack, create_stack, moto_stack, outputs

API_URL = "https://abc123.execute-api.eu-west-1.amazonaws.com/"
SECRET = "deployed-web-secret-not-real"


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_CONFIG", "SIGIL_DATA_DIR", "SIGIL_BACKEND", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[MotoStack]:
    with moto_stack(tmp_path) as deployed:
        clients.secretsmanager(REGION).create_secret(
            Name=deployed.resources.secrets_prefix + web.secret_name("default"), SecretString=SECRET
        )
        # The same stack with the page's output, as infra/stack.py declares it.
        create_stack(deployed.name + "-web", outputs(deployed.resources) | {"ApiUrl": API_URL})
        yield MotoStack(deployed.name + "-web", deployed.resources)


def test_web_open_prints_the_deployed_pages_url_with_a_token_for_it(stack: MotoStack) -> None:
    result = CliRunner().invoke(app, ["web", "open", "-u", "alice", "-s", "alice.s1", *stack.args()])
    assert result.exit_code == 0, result.output
    url, _, token = result.output.strip().partition("#token=")
    assert url == API_URL
    claims = web_tokens.verify(SECRET, token, now=time.time(), workspace="default")
    assert (claims.user, claims.sessions) == ("alice", ["alice.s1"])


def test_web_token_signs_with_the_deployed_secret(stack: MotoStack) -> None:
    result = CliRunner().invoke(app, ["web", "token", "-u", "bob", *stack.args()])
    assert result.exit_code == 0, result.output
    claims = web_tokens.verify(SECRET, result.output.strip(), now=time.time(), workspace="default")
    assert claims.user == "bob"


def test_a_stack_without_the_page_says_so(tmp_path: Path) -> None:
    with moto_stack(tmp_path) as bare:
        result = CliRunner().invoke(app, ["web", "open", "-u", "alice", *bare.args()])
    assert result.exit_code == 1 and "no ApiUrl output" in result.output
