"""What a replay changes about a workspace before it runs the recorded turns again."""

from __future__ import annotations

import re

from pydantic import Field, ValidationError, field_validator

from shared.models import ContextConfig, MemoryConfig, Model, WorkspaceConfig

MODEL_REF_PATTERN = r"^[a-z][a-z0-9_-]*/\S+$"


class ReplayChange(Model):
    """The change under test, applied to the sandbox's copy of the workspace's config. A field left
    None keeps what the workspace has."""

    model: str | None = Field(default=None, max_length=200)
    system_prompt: str | None = Field(default=None, min_length=1, max_length=100_000)
    # The installed skills the turns may use (WorkspaceConfig.skills); [] allows none.
    skills: list[str] | None = None
    tools_allow: list[str] | None = None
    tools_deny: list[str] | None = None
    memory: MemoryConfig | None = None
    # The context pipeline's mode and budget (docs/context.md, "The context pipeline").
    context: ContextConfig | None = None

    @field_validator("model")
    @classmethod
    def _model(cls, model: str | None) -> str | None:
        # Said in words: a regex in an error message is the reader's puzzle, not an answer.
        if model is not None and not re.match(MODEL_REF_PATTERN, model):
            raise ValueError(f"{model!r} is not a model: name it as provider/model, e.g. openai/{model}")
        return model

    @field_validator("skills", "tools_allow", "tools_deny")
    @classmethod
    def _names(cls, names: list[str] | None) -> list[str] | None:
        if names is None:
            return None
        cleaned = [n.strip() for n in names if n.strip()]
        for name in cleaned:
            if len(name) > 100 or any(c.isspace() for c in name):
                raise ValueError(f"{name!r} is not a skill or tool name")
        return cleaned

    def apply(self, config: WorkspaceConfig) -> WorkspaceConfig:
        fields = self.model_dump(exclude_none=True, exclude={"memory", "context"})
        if self.memory is not None:
            fields["memory"] = self.memory.model_copy(deep=True)
        if self.context is not None:
            fields["context"] = self.context.model_copy(deep=True)
        # Validated again as a whole, so a change can't produce a config the stores would refuse.
        return WorkspaceConfig.model_validate({**config.model_dump(), **fields})

    def describe(self) -> list[str]:
        """One line per field changed, for the report's header."""
        lines: list[str] = []
        if self.model is not None:
            lines.append(f"model: {self.model}")
        if self.system_prompt is not None:
            head = self.system_prompt.strip().splitlines()[0] if self.system_prompt.strip() else ""
            lines.append(f"system prompt: {len(self.system_prompt)} characters ({head[:80]!r})")
        if self.skills is not None:
            lines.append(f"skills: {', '.join(self.skills) or '(none)'}")
        if self.tools_allow is not None:
            lines.append(f"tools allowed: {', '.join(self.tools_allow) or '(none)'}")
        if self.tools_deny is not None:
            lines.append(f"tools denied: {', '.join(self.tools_deny) or '(none)'}")
        if self.memory is not None:
            lines.append(f"memory policy: {self.memory.model_dump_json()}")
        if self.context is not None:
            lines.append(f"context pipeline: {self.context.mode}, {self.context.budget_tokens} tokens")
        return lines or ["(nothing: the recorded setup, run again)"]


def change_problems(exc: ValidationError) -> str:
    """A refused change's problems in one line: each field and what is wrong with it."""
    return "; ".join(
        f"{'.'.join(map(str, e['loc'])) or 'change'}: "
        + (str(e["ctx"]["error"]) if e["type"] == "value_error" else e["msg"])
        for e in exc.errors()
    )
