"""sigil.yaml: `sigil config validate` names the file, line and field of each error; the published
schema is the model's; the example validates; the file's defaults fill what the environment
leaves unset; `sigil dev` refuses a bad file."""

from __future__ import annotations

import json
import logging
import textwrap
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shared.budgets import PriceTable
from shared.cli import app
from shared.config import Settings
from shared.configuration import ConfigFileError, file_settings, json_schema, load_file

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SIGIL_CONFIG", "SIGIL_MODEL", "SIGIL_FALLBACK_MODEL", "SIGIL_DATA_DIR", "SIGIL_BACKEND"):
        monkeypatch.delenv(name, raising=False)


def write(tmp_path: Path, text: str, name: str = "sigil.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def errors_of(path: Path) -> list[str]:
    result = runner.invoke(app, ["config", "validate", str(path)])
    assert result.exit_code == 1, result.output
    return result.output.strip().splitlines()


def test_a_bad_value_names_file_line_and_field_path(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        defaults:
          model: openai/gpt-4.1-mini
        workspaces:
          family:
            name: Family
            active_window: 1
          team:
            max_tool_calls_per_turn: lots
        """,
    )
    assert errors_of(path) == [
        f"{path}:6: workspaces.family.active_window: Input should be greater than or equal to 2",
        f"{path}:8: workspaces.team.max_tool_calls_per_turn: "
        "Input should be a valid integer, unable to parse string as an integer",
    ]


def test_an_unknown_field_lists_the_known_ones_at_its_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        workspaces:
          family:
            memory:
              recall: personal
              forget_after: 3
        """,
    )
    [error] = errors_of(path)
    assert error == (
        f"{path}:5: workspaces.family.memory.forget_after: unknown field 'forget_after'; "
        "the known ones are: decay, recall"
    )


def test_route_errors_point_at_the_route_and_its_field(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        workspaces:
          family: {}
        channels:
          - platform: telegram
            name: family
            workspace: family
            account: 7012345678
          - platform: signal
            name: Bad_Name
            workspace: family
          - platform: telegram
            name: family
            workspace: famly
            account: 7012345678
            chats:
              "-100123": {workspace: nowhere}
        """,
    )
    # Each field's error, and the cross-field rules of the routes that are valid on their own,
    # together in one run, in file order.
    cross_field = [
        f"{path}:12: channels[2].name: route telegram/family is already defined at channels[0]",
        f"{path}:13: channels[2].workspace: unknown workspace 'famly'; the known ones are: default, family",
        f"{path}:14: channels[2].account: telegram account '7012345678' is already routed by channels[0]",
        f"{path}:16: channels[2].chats.-100123.workspace: unknown workspace 'nowhere'; "
        "the known ones are: default, family",
    ]
    assert errors_of(path) == [
        f"{path}:8: channels[1].platform: Input should be 'telegram', 'slack', 'discord' or 'whatsapp'",
        f"{path}:9: channels[1].name: 'Bad_Name' is not a route name: a route name is 1-32 characters of "
        "a-z, 0-9 and -, starting and ending with a letter or digit (it is the last segment of the "
        "webhook path /webhooks/PLATFORM/NAME)",
        *cross_field,
    ]

    # Once the fields are right, the cross-field rules alone, the same.
    fixed = path.read_text().replace("platform: signal", "platform: slack").replace("Bad_Name", "acme")
    path.write_text(fixed)
    assert errors_of(path) == cross_field


def test_yaml_syntax_duplicates_and_missing_fields(tmp_path: Path) -> None:
    broken = write(tmp_path, "workspaces:\n  family:\n    name: [unclosed\n", "broken.yaml")
    [error] = errors_of(broken)
    assert error.startswith(f"{broken}:4: not valid YAML:")

    twice = write(tmp_path, "workspaces:\n  family: {}\n  team: {}\n  family: {name: again}\n", "twice.yaml")
    assert errors_of(twice) == [f"{twice}:4: workspaces.family: duplicate key (it is set twice)"]

    missing = write(tmp_path, "channels:\n  - platform: slack\n    name: acme\n", "missing.yaml")
    assert errors_of(missing) == [f"{missing}:2: channels[0].workspace: Field required"]

    both = write(tmp_path, "workspaces:\n  family:\n    personality: a\n    system_prompt: b\n", "both.yaml")
    assert errors_of(both) == [
        f"{both}:3: workspaces.family: set system_prompt or personality, not both (they are the same field)"
    ]

    bad_key = write(tmp_path, "workspaces:\n  ok: {}\n  'no#hash': {}\n", "key.yaml")
    [error] = errors_of(bad_key)
    assert error == (
        f"{bad_key}:3: workspaces.no#hash (the key): 'no#hash' is not a workspace id: a workspace id is "
        "1-128 characters of letters, digits and . _ @ + = -, starting with a letter or digit"
    )

    listed = write(tmp_path, "- just\n- a list\n", "list.yaml")
    assert errors_of(listed) == [f"{listed}:1: the file must be a mapping (defaults, workspaces, channels)"]

    no_provider = write(
        tmp_path, "workspaces:\n  team:\n    model_choices: [openai/gpt-4.1, gpt-4.1]\n", "ref.yaml"
    )
    assert errors_of(no_provider) == [
        f"{no_provider}:3: workspaces.team.model_choices: 'gpt-4.1' is not provider/model "
        "(e.g. openai/gpt-4.1-mini)"
    ]
    # The gateway's defaults are told the same, at their own line
    no_provider = write(tmp_path, "defaults:\n  model: openai/gpt-4.1\n  fallback_model: gpt-4o\n", "d.yaml")
    assert errors_of(no_provider) == [
        f"{no_provider}:3: defaults.fallback_model: 'gpt-4o' is not provider/model (e.g. openai/gpt-4.1-mini)"
    ]

    absent = tmp_path / "absent.yaml"
    assert errors_of(absent) == [f"{absent}: no such file"]


def test_the_published_schema_is_the_models_and_the_example_is_valid() -> None:
    # docs/sigil.schema.json is `sigil config schema`'s output; regenerate it when the model changes:
    #   sigil config schema > docs/sigil.schema.json
    published = (ROOT / "docs" / "sigil.schema.json").read_text()
    assert published == json_schema(), "docs/sigil.schema.json is stale: run `sigil config schema`"
    printed = runner.invoke(app, ["config", "schema"])
    assert printed.exit_code == 0
    assert json.loads(printed.stdout) == json.loads(published)

    example = ROOT / "sigil.example.yaml"
    assert example.read_text().startswith("# yaml-language-server: $schema=docs/sigil.schema.json\n")
    loaded = load_file(example)
    assert loaded.workspace_ids() == ["family", "team"]
    assert [r.key for r in loaded.channels] == ["telegram/family", "telegram/team", "slack/acme"]
    result = runner.invoke(app, ["config", "validate", str(example)])
    assert result.exit_code == 0, result.output
    assert "valid" in result.stdout


def test_an_editor_checking_with_the_schema_accepts_the_example_and_flags_what_the_loader_refuses() -> None:
    # What the YAML language server does with the schema line: JSON Schema 2020-12 validation.
    import jsonschema
    import yaml

    validator = jsonschema.Draft202012Validator(json.loads((ROOT / "docs" / "sigil.schema.json").read_text()))
    assert list(validator.iter_errors(yaml.safe_load((ROOT / "sigil.example.yaml").read_text()))) == []
    bad = {"workspaces": {"family": {"colour": "red", "active_window": 1}}}
    assert sorted(e.message for e in validator.iter_errors(bad)) == [
        "1 is less than the minimum of 2",
        "Additional properties are not allowed ('colour' was unexpected)",
    ]


def test_the_files_defaults_fill_what_the_environment_leaves_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        """
        defaults:
          model: openai/gpt-4.1-mini
          fallback_model: anthropic/claude-haiku-4-5
          embedding_model: none
        """,
    )
    monkeypatch.setenv("SIGIL_CONFIG", str(path))
    monkeypatch.setenv("SIGIL_MODEL", "anthropic/claude-sonnet-4-5")
    settings, loaded = file_settings()
    assert loaded is not None
    assert settings.config_file == path
    # The environment wins; the file fills the rest.
    assert settings.model == "anthropic/claude-sonnet-4-5"
    assert settings.fallback_model == "anthropic/claude-haiku-4-5"
    assert settings.embedding_model == "none"
    assert settings.consolidation_model is None
    # A flag wins over both.
    assert file_settings(fallback_model="openai/gpt-4.1")[0].fallback_model == "openai/gpt-4.1"


def test_the_files_defaults_configure_transcription_and_model_capabilities(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        """
        defaults:
          transcription_model: openai/whisper-1
          transcription_base_url: http://127.0.0.1:8000/v1
          transcription_usd_per_min: 0.001
          model_capabilities:
            "openai/llava*": [image]
        """,
    )
    monkeypatch.setenv("SIGIL_CONFIG", str(path))
    settings, _ = file_settings()
    assert settings.transcription_model == "openai/whisper-1"
    assert settings.transcription_base_url == "http://127.0.0.1:8000/v1"
    assert settings.transcription_usd_per_min == Decimal("0.001")
    assert settings.model_capabilities == {"openai/llava*": ["image"]}
    bad = write(tmp_path, "defaults:\n  model_capabilities:\n    openai/x: [smell]\n")
    monkeypatch.setenv("SIGIL_CONFIG", str(bad))
    with pytest.raises(ConfigFileError):
        file_settings()


def test_no_file_at_the_default_path_means_defaults_and_a_named_missing_file_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings, loaded = file_settings()
    assert loaded is None
    assert settings.model is None
    monkeypatch.setenv("SIGIL_CONFIG", str(tmp_path / "nowhere.yaml"))
    with pytest.raises(ConfigFileError) as raised:
        file_settings()
    assert raised.value.message == f"{tmp_path / 'nowhere.yaml'}: no such file"


def test_sigil_dev_exits_1_with_the_line_numbered_errors_of_a_bad_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "workspaces:\n  family:\n    active_window: 1000\n")
    monkeypatch.setenv("SIGIL_CONFIG", str(path))
    handlers_before = list(logging.getLogger().handlers)
    result = runner.invoke(app, ["dev", "--data-dir", str(tmp_path / "state"), "--port", "1"])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"{path}:3: workspaces.family.active_window: Input should be less than or equal to 500"
    )
    # The other commands read the same settings, so they refuse it the same way.
    listed = runner.invoke(app, ["pairing", "list", "--data-dir", str(tmp_path / "state")])
    assert listed.exit_code == 1
    assert listed.output.strip() == result.output.strip()
    # ... and a refused start leaves the process's logging as it found it
    assert logging.getLogger().handlers == handlers_before


def test_the_local_gateway_applies_the_file_at_start_and_says_which(tmp_path: Path) -> None:
    from shared.cli.gateway import _config_line
    from shared.local.gateway import LocalGateway

    path = write(
        tmp_path,
        """
        defaults: {model: openai/gpt-4.1-mini}
        workspaces:
          family: {unknown_sender_policy: pairing}
        channels:
          - {platform: telegram, name: family, workspace: family}
        """,
    )
    settings, loaded = file_settings(data_dir=tmp_path / "state", SIGIL_CONFIG=path)
    assert settings.model == "openai/gpt-4.1-mini"
    gateway = LocalGateway(settings, config=loaded)
    try:
        gateway.start()
        family = gateway.backend.workspaces.get("family")
        assert family is not None and (family.model, family.unknown_sender_policy) == (
            "openai/gpt-4.1-mini",
            "pairing",
        )
        assert [r.key for r in gateway.backend.routes.list_routes()] == ["telegram/family"]
        # Its own default workspace is still created, as without a file.
        assert gateway.backend.workspaces.get("default") is not None
    finally:
        gateway.stop()
    assert _config_line(settings, loaded) == (
        f"{path.resolve()} applied: workspaces family; routes telegram/family"
    )
    no_file = Settings(data_dir=tmp_path / "state")
    assert _config_line(no_file, None) == "none (sigil.yaml not found: defaults, nothing applied)"


def test_a_value_off_its_pattern_is_told_what_is_allowed(tmp_path: Path) -> None:
    # Every pattern the file's schema has is said in words (a new one must be added to the rules)
    from shared.configuration.loader import PATTERN_RULES

    def patterns(node: object) -> set[str]:
        if isinstance(node, dict):
            found = {node["pattern"]} if isinstance(node.get("pattern"), str) else set()
            return found.union(*(patterns(v) for v in node.values()))
        if isinstance(node, list):
            return set().union(*(patterns(v) for v in node))
        return set()

    schema_patterns = patterns(json.loads(json_schema()))
    assert schema_patterns and schema_patterns <= set(PATTERN_RULES)

    # ... at the line and path of the value, with the other errors of the file
    path = write(
        tmp_path,
        """
        defaults:
          embedding_model: big-model
        workspaces:
          family: {active_window: 1}
        channels:
          - {platform: slack, name: acme, workspace: "team bot"}
          - {platform: slack, name: home, workspace: famly}
        """,
    )
    assert errors_of(path) == [
        f"{path}:2: defaults.embedding_model: 'big-model' is not an embedding model: an embedding model is "
        "auto, none, local, or provider/model, e.g. openai/text-embedding-3-small",
        f"{path}:4: workspaces.family.active_window: Input should be greater than or equal to 2",
        f"{path}:6: channels[0].workspace: 'team bot' is not a workspace id: a workspace id is 1-128 "
        "characters of letters, digits and . _ @ + = -, starting with a letter or digit",
        f"{path}:7: channels[1].workspace: unknown workspace 'famly'; the known ones are: default, family",
    ]


def test_the_files_model_prices_price_the_gateways_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a file that declares a price for a self-hosted model and for every model nobody priced
    path = write(
        tmp_path,
        """
        defaults:
          model: openai/llama3.1:70b
          model_prices:
            openai/llama3.1:70b: {input_per_mtok: 0.05, output_per_mtok: "0.10"}
            "*": {input_per_mtok: 3, output_per_mtok: 15}
        """,
    )
    monkeypatch.setenv("SIGIL_CONFIG", str(path))
    monkeypatch.delenv("SIGIL_MODEL_PRICES", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://10.0.0.7:8000/v1")  # a vLLM server on the LAN
    settings, _ = file_settings()
    prices = PriceTable.from_settings(settings)
    # Then the declared price wins over the local server's "free", exactly as written
    declared = prices.quote("openai/llama3.1:70b")
    assert (declared.source, declared.price.input_per_mtok, declared.price.output_per_mtok) == (
        "declared",
        Decimal("0.05"),
        Decimal("0.10"),
    )
    assert prices.cost_nanos("openai/llama3.1:70b", 1_000_000, 1_000_000) == 150_000_000
    # and another model of that server, priced by nobody, is free; an unlisted model elsewhere
    # costs the declared "*"
    assert prices.quote("openai/qwen2.5:7b").source == "local"
    assert prices.cost_nanos("openai/qwen2.5:7b", 10**6, 10**6) == 0
    assert prices.quote("anthropic/claude-next").price.input_per_mtok == 3
    # And the environment's SIGIL_MODEL_PRICES wins over the file's, wholesale
    monkeypatch.setenv(
        "SIGIL_MODEL_PRICES", '{"openai/llama3.1:70b": {"input_per_mtok": 1, "output_per_mtok": 2}}'
    )
    env_prices = PriceTable.from_settings(file_settings()[0])
    assert env_prices.price("openai/llama3.1:70b").output_per_mtok == 2
    assert env_prices.quote("anthropic/claude-next").price.input_per_mtok == 15  # no "*" any more


def test_a_bad_model_price_names_its_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        defaults:
          model_prices:
            llama3: {input_per_mtok: 0, output_per_mtok: 0}
            openai/gpt-x: {input_per_mtok: -1, output_per_mtok: 0}
        """,
    )
    with pytest.raises(ConfigFileError) as raised:
        load_file(path)
    lines = str(raised.value).splitlines()
    assert lines[0] == (
        f"{path}:3: defaults.model_prices.llama3 (the key): 'llama3' is not a priced model: a priced "
        'model is provider/model, e.g. openai/llama3.1:8b, or "*" (every other model)'
    )
    assert lines[1].startswith(f"{path}:4: defaults.model_prices.openai/gpt-x.input_per_mtok: ")
