"""Settings read from the environment as pydantic-settings' env source reads it: SIGIL_<FIELD> in
any case, the aliases (OPENAI_API_KEY, AWS_REGION, SIGIL_CONFIG), JSON for lists and maps, and an
argument (by name or alias) before a variable."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from pydantic import ValidationError

from shared.config import Settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "SIGIL_MODEL",
        "SIGIL_PORT",
        "OPENAI_API_KEY",
        "AWS_REGION",
        "SIGIL_WEB_ORIGINS",
        "SIGIL_CONFIG",
    ):
        monkeypatch.delenv(name, raising=False)


def test_a_field_is_read_from_its_sigil_variable_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGIL_MODEL", "openai/gpt-4.1-mini")
    monkeypatch.setenv("sigil_port", "9100")
    monkeypatch.setenv("SIGIL_COALESCE_BURST", "true")

    settings = Settings()

    assert (settings.model, settings.port, settings.coalesce_burst) == ("openai/gpt-4.1-mini", 9100, True)
    assert {"model", "port", "coalesce_burst"} <= settings.model_fields_set


def test_an_aliased_field_is_read_from_its_alias_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("SIGIL_CONFIG", "conf/sigil.yaml")
    monkeypatch.setenv("SIGIL_OPENAI_API_KEY", "sk-not-this-one")

    settings = Settings()

    assert settings.openai_api_key is not None
    assert settings.openai_api_key.get_secret_value() == "sk-from-env"
    assert (settings.aws_region, settings.config_file) == ("eu-west-1", Path("conf/sigil.yaml"))


def test_lists_and_maps_are_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGIL_WEB_ORIGINS", '["https://chat.example.com"]')
    monkeypatch.setenv("SIGIL_MODEL_PRICES", '{"openai/m": {"input_per_mtok": 1, "output_per_mtok": "2.5"}}')

    settings = Settings()

    assert settings.web_origins == ["https://chat.example.com"]
    assert settings.model_prices == {
        "openai/m": {"input_per_mtok": Decimal(1), "output_per_mtok": Decimal("2.5")}
    }


def test_a_list_that_is_not_json_is_an_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGIL_WEB_ORIGINS", "https://chat.example.com")

    with pytest.raises(ValidationError, match="SIGIL_WEB_ORIGINS must be JSON"):
        Settings()


def test_a_bad_value_is_the_fields_validation_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGIL_PORT", "eighty")

    with pytest.raises(ValidationError, match="port"):
        Settings()


def test_an_argument_by_name_or_alias_wins_over_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGIL_MODEL", "openai/from-env")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")

    by_name = Settings(model="anthropic/claude", openai_api_key=None)
    by_alias = Settings(OPENAI_API_KEY="sk-given")

    assert (by_name.model, by_name.openai_api_key) == ("anthropic/claude", None)
    assert by_alias.openai_api_key is not None
    assert by_alias.openai_api_key.get_secret_value() == "sk-given"
    assert by_alias.model == "openai/from-env"


def test_unknown_variables_and_arguments_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGIL_NO_SUCH_SETTING", "1")

    assert Settings(no_such_field=1).model_dump() == Settings().model_dump()
