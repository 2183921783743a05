"""The settings every command reads: the environment first, then the file's `defaults`."""

from __future__ import annotations

import json
from typing import Any

from shared.config import Settings
from shared.configuration.loader import load_file
from shared.configuration.model import SigilFile


def file_settings(**overrides: Any) -> tuple[Settings, SigilFile | None]:
    """Settings from `overrides` (command-line flags) and SIGIL_* variables, then the fields both
    leave unset filled from the configuration file's `defaults`; and the file (None when there
    is none at the default path). Raises ConfigFileError for a file with errors, or a file named
    by SIGIL_CONFIG (or an override) that does not exist.
    """
    settings = Settings(**overrides)
    path = settings.config_file
    if "config_file" not in settings.model_fields_set and not path.exists():
        return settings, None
    file = load_file(path, default_workspace=settings.default_workspace)
    fill = {
        name: value
        for name, value in file.defaults.model_dump(exclude_none=True).items()
        if name not in settings.model_fields_set
    }
    return (settings.model_copy(update=fill) if fill else settings), file


def json_schema() -> str:
    """The JSON Schema of sigil.yaml, as `sigil config schema` prints it (docs/sigil.schema.json)."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **SigilFile.model_json_schema(),
    }
    schema["title"] = "sigil.yaml"
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
