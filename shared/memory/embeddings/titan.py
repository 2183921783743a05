"""Amazon Titan Text Embeddings v2 on Bedrock (`invoke_model`, one text per call).

The request body is {"inputText", "dimensions" (256, 512 or 1024), "normalize": true}; the answer
{"embedding": [...], "inputTextTokenCount": n}. Titan takes one text per call, so a list is sent
on a few threads at once (boto3 clients are thread-safe). botocore's standard retry mode does the
retries (3 attempts, backoff, throttling included); what still fails becomes an EmbeddingError.
Inside a deadline's scope (a turn's) each call ends by it, retries included (the client is bound
to it: shared.deadline.boto); the threads run in a copy of the caller's context, so
the scope is theirs too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from typing import Any

from shared.errors import DeadlineExceeded, EmbeddingError, ProviderError
from shared.memory.embeddings.base import api_input, unit
from shared.providers.bedrock import _botocore_error, _client_error, bedrock_client

DEFAULT_MODEL = "amazon.titan-embed-text-v2:0"
DEFAULT_DIMENSIONS = 1024
ALLOWED_DIMENSIONS = (256, 512, 1024)
# Titan v2 accepts up to 50,000 characters (8,192 tokens) per call; a longer text is cut rather
# than refused, since the chunker keeps real inputs far below it.
MAX_INPUT_CHARS = 50_000


class TitanEmbedder:
    def __init__(
        self,
        region: str,
        *,
        model: str = DEFAULT_MODEL,
        dimensions: int = DEFAULT_DIMENSIONS,
        client: Any = None,
        max_concurrency: int = 4,
        timeout_s: float = 30.0,
    ) -> None:
        if dimensions not in ALLOWED_DIMENSIONS:
            raise ValueError(f"Titan v2 returns 256, 512 or 1024 dimensions, not {dimensions}")
        self.model = model
        self.dimensions = dimensions
        self.model_id = (
            f"bedrock/{model}" if dimensions == DEFAULT_DIMENSIONS else f"bedrock/{model}@{dimensions}"
        )
        self.region = region
        self._client = client
        self._max_concurrency = max(1, max_concurrency)
        self._timeout_s = timeout_s

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = bedrock_client(self.region, 3, self._timeout_s)
        return self._client

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        inputs = [api_input(t)[:MAX_INPUT_CHARS] for t in texts]
        if len(inputs) <= 1 or self._max_concurrency == 1:
            return [self._embed_one(t) for t in inputs]
        with ThreadPoolExecutor(max_workers=min(self._max_concurrency, len(inputs))) as pool:
            # In input order, the first failure re-raised. One copy of the context a thread: a
            # context is entered by one thread at a time.
            futures = [pool.submit(copy_context().run, self._embed_one, t) for t in inputs]
            return [f.result() for f in futures]

    def _embed_one(self, text: str) -> list[float]:
        from botocore.exceptions import BotoCoreError, ClientError

        body = {"inputText": text, "dimensions": self.dimensions, "normalize": True}
        try:
            response = self.client.invoke_model(
                modelId=self.model,
                body=json.dumps(body),
                contentType="application/json",
                accept="application/json",
            )
            payload = json.loads(response["body"].read())
        except DeadlineExceeded:
            raise
        except ClientError as exc:
            raise _embedding_error(_client_error(exc)) from None
        except BotoCoreError as exc:
            raise _embedding_error(_botocore_error(exc)) from None
        except (ValueError, KeyError) as exc:
            raise EmbeddingError(
                f"{self.model_id} sent an unreadable response ({type(exc).__name__})"
            ) from None
        embedding = payload.get("embedding") if isinstance(payload, dict) else None
        if not isinstance(embedding, list):
            raise EmbeddingError(f"{self.model_id} sent a response without an embedding")
        return unit(embedding, self.dimensions, self.model_id)


def _embedding_error(error: ProviderError) -> EmbeddingError:
    # The chat provider's mapping of Bedrock errors (safe message, retryable codes, Retry-After),
    # re-raised as the embedding error callers degrade on.
    message = error.message.replace("the model provider", "the embedding provider")
    return EmbeddingError(message, retryable=error.retryable, retry_after_s=error.retry_after_s)
