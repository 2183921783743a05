"""Voice notes to text through an OpenAI-compatible `/audio/transcriptions` endpoint (docs/media.md).

OpenAI's own (gpt-4o-mini-transcribe, gpt-4o-transcribe, whisper-1) and the servers that copy its
API (faster-whisper-server/speaches, LocalAI, vLLM's, Groq's) take the same multipart request and
answer `{"text": ...}`, with a `usage` object on OpenAI's newer responses: `{"type": "duration",
"seconds": ...}` for whisper-1, token counts for the gpt-4o models.

The gateway's choice (SIGIL_TRANSCRIPTION_MODEL): "auto" (the default) transcribes with
openai/gpt-4o-mini-transcribe when an OpenAI key is configured and OPENAI_BASE_URL is not (a
compatible chat server, Ollama say, seldom serves transcription); "none" turns it off; any
"openai/<model>" turns it on against SIGIL_TRANSCRIPTION_BASE_URL (else OPENAI_BASE_URL, else
OpenAI's API). With none configured a voice note reaches the model as a note saying so.

The `openai` SDK is imported on the first transcription, never when this module is.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from shared.config import Settings
from shared.deadline import check, cut_by, deadline, within
from shared.errors import DeadlineExceeded, ProviderError
from shared.models.media import Transcript
from shared.providers.openai import KEYLESS_PLACEHOLDER, safe_error_message
from shared.providers.resilient import http_error_retry

if TYPE_CHECKING:
    import openai

DEFAULT_MODEL: Final = "openai/gpt-4o-mini-transcribe"

# USD per minute of audio, OpenAI's list prices (docs/media.md, "Costs"); another model is
# charged DEFAULT_USD_PER_MIN unless SIGIL_TRANSCRIPTION_USD_PER_MIN says otherwise.
USD_PER_MIN: Final[dict[str, Decimal]] = {
    "openai/gpt-4o-mini-transcribe": Decimal("0.003"),
    "openai/gpt-4o-transcribe": Decimal("0.006"),
    "openai/whisper-1": Decimal("0.006"),
}
DEFAULT_USD_PER_MIN: Final = Decimal("0.006")


def usd_per_min(model_ref: str, settings: Settings | None = None) -> Decimal:
    if settings is not None and settings.transcription_usd_per_min is not None:
        return settings.transcription_usd_per_min
    return USD_PER_MIN.get(model_ref, DEFAULT_USD_PER_MIN)


class OpenAITranscriber:
    """The Transcriber port (shared.ports) over the `openai` SDK's audio.transcriptions."""

    def __init__(
        self,
        model: str,
        api_key: str | None,
        base_url: str | None = None,
        *,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        deadline_s: float | None = None,
    ) -> None:
        self.model = model
        self.model_ref = f"openai/{model}"
        self.base_url = base_url
        self.deadline_s = deadline_s
        self._api_key = api_key or KEYLESS_PLACEHOLDER
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._client: openai.OpenAI | None = None

    def _sdk(self) -> openai.OpenAI:
        if self._client is None:
            import openai

            self._client = openai.OpenAI(
                api_key=self._api_key,
                base_url=self.base_url,
                timeout=self._timeout_s,
                max_retries=self._max_retries,
            )
        return self._client

    def transcribe(self, audio: bytes, *, mime_type: str, filename: str) -> Transcript:
        import openai

        at = within(self.deadline_s)
        try:
            check(at)
            with deadline(at):
                result = self._sdk().audio.transcriptions.create(
                    model=self.model, file=(filename, audio, mime_type), response_format="json"
                )
        except DeadlineExceeded:
            raise
        except openai.OpenAIError as exc:
            if cut_by(at):
                raise DeadlineExceeded() from None
            connection = isinstance(exc, openai.APIConnectionError)
            retryable, after = (True, None) if connection else http_error_retry(exc)
            message = safe_error_message(exc, "the transcription provider", self._api_key)
            raise ProviderError(message, retryable=retryable, retry_after_s=after) from None
        return Transcript(text=result.text.strip(), seconds=_seconds(result), model=self.model_ref)


def _seconds(result: Any) -> float | None:
    usage = getattr(result, "usage", None)
    seconds = getattr(usage, "seconds", None) if getattr(usage, "type", None) == "duration" else None
    return float(seconds) if seconds is not None else None


def transcriber_from_settings(settings: Settings) -> OpenAITranscriber | None:
    """The gateway's transcriber, or None when transcription is off (see the module's note)."""
    choice = settings.transcription_model.strip()
    if choice == "none":
        return None
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    if choice == "auto":
        if key is None or settings.openai_base_url or settings.transcription_base_url:
            return None
        choice = DEFAULT_MODEL
    provider, _, model = choice.partition("/")
    if provider != "openai" or not model:
        raise ValueError(f"SIGIL_TRANSCRIPTION_MODEL {choice!r}: expected auto, none or openai/<model>")
    return OpenAITranscriber(
        model,
        key,
        settings.transcription_base_url or settings.openai_base_url,
        timeout_s=settings.provider_timeout_s,
        max_retries=settings.provider_max_retries,
        deadline_s=settings.provider_deadline_s,
    )
