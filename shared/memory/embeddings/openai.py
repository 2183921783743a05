"""OpenAI embeddings (text-embedding-3-small by default) and OpenAI-compatible servers.

The `openai` SDK is imported, and its client built, on the first embedding asked for. The SDK's own
retry loop does spec 003's retries (3 attempts, exponential backoff from 0.5 s, Retry-After
honoured, no retry on other 4xx); what still fails becomes an EmbeddingError whose `retryable`
says whether a later attempt (the backfill) may succeed.

Inside a deadline's scope (a turn's: shared.deadline) the call ends by it: the client
talks through the model providers' transport (shared.providers.http_deadline), which cuts every
network wait to the time left and starts no retry it has no time for, and the cut is raised as
DeadlineExceeded, not as an embedding failure to try again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from shared.deadline import out_of_time
from shared.errors import DeadlineExceeded, EmbeddingError
from shared.memory.embeddings.base import api_input, unit
from shared.providers.openai import KEYLESS_PLACEHOLDER, safe_error_message
from shared.providers.resilient import http_error_retry

if TYPE_CHECKING:
    import openai

DEFAULT_MODEL = "text-embedding-3-small"
# Each model's native width; text-embedding-3 models can return fewer (the `dimensions` parameter).
NATIVE_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
# The API takes up to 2048 inputs per request and 300,000 tokens summed over them. Counting
# characters is a safe stand-in for tokens (a token is rarely less than one character).
MAX_BATCH_INPUTS = 2048
MAX_BATCH_CHARS = 250_000


class OpenAIEmbedder:
    def __init__(
        self,
        api_key: str | Callable[[], str | None] | None,
        *,
        model: str = DEFAULT_MODEL,
        dimensions: int | None = None,
        base_url: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 2,
    ) -> None:
        """`api_key` may be a function: it is called when the first embedding is asked for, so a
        key kept in Secrets Manager is not fetched (nor the SDK imported) while building a backend.
        """
        native = NATIVE_DIMENSIONS.get(model)
        if dimensions is None:
            if native is None:
                raise ValueError(f"unknown embedding model {model!r}: give its dimensions")
            dimensions = native
        if dimensions < 1 or (native is not None and dimensions > native):
            raise ValueError(f"{model} cannot return {dimensions} dimensions")
        self.model = model
        self.dimensions = dimensions
        # Vectors cut to fewer dimensions are different vectors: the id says so, so they are never
        # compared with full-width ones.
        self.model_id = f"openai/{model}" if dimensions == native else f"openai/{model}@{dimensions}"
        # The parameter is sent only when it changes something: compatible servers may reject it.
        self._send_dimensions = dimensions != native
        self._key_source = api_key
        self._base_url = base_url
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._api_key = ""
        self._client: openai.OpenAI | None = None
        self._lock = threading.Lock()

    def _ensure_client(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                import openai

                from shared.providers.http_deadline import deadline_client_options

                key = self._key_source() if callable(self._key_source) else self._key_source
                if not key and not self._base_url:
                    raise EmbeddingError(
                        "OpenAI embeddings need OPENAI_API_KEY (or the llm/openai-api-key secret), "
                        "or OPENAI_BASE_URL for a compatible server"
                    )
                self._api_key = key or KEYLESS_PLACEHOLDER
                self._client = openai.OpenAI(
                    api_key=self._api_key,
                    base_url=self._base_url,
                    timeout=self._timeout_s,
                    max_retries=self._max_retries,
                    http_client=openai.DefaultHttpxClient(**deadline_client_options(openai.OpenAIError)),
                )
            return self._client

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        inputs = [api_input(t) for t in texts]
        vectors: list[list[float]] = []
        for batch in _batches(inputs):
            vectors.extend(self._embed_batch(batch))
        return vectors

    def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        import openai

        client = self._ensure_client()
        try:
            if self._send_dimensions:
                response = client.embeddings.create(
                    model=self.model, input=batch, dimensions=self.dimensions, encoding_format="float"
                )
            else:
                response = client.embeddings.create(model=self.model, input=batch, encoding_format="float")
        except DeadlineExceeded:
            raise out_of_time("the embedding call") from None
        except openai.OpenAIError as exc:
            # Timeouts are APIConnectionErrors too; both are worth another try.
            retryable, after = (
                (True, None) if isinstance(exc, openai.APIConnectionError) else http_error_retry(exc)
            )
            raise EmbeddingError(self._safe_message(exc), retryable=retryable, retry_after_s=after) from None
        data = sorted(response.data, key=lambda d: d.index)
        if [d.index for d in data] != list(range(len(batch))):
            raise EmbeddingError(f"{self.model_id} returned {len(data)} vectors for {len(batch)} inputs")
        return [unit(d.embedding, self.dimensions, self.model_id) for d in data]

    def _safe_message(self, exc: Exception) -> str:
        return safe_error_message(exc, "the embedding provider", self._api_key)


def _batches(inputs: list[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    chars = 0
    for text in inputs:
        if batch and (len(batch) == MAX_BATCH_INPUTS or chars + len(text) > MAX_BATCH_CHARS):
            yield batch
            batch, chars = [], 0
        batch.append(text)
        chars += len(text)
    if batch:
        yield batch
