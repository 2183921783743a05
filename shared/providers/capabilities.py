"""What each model takes besides text (docs/media.md, "Capability table"), and what a photo costs.

genai-prices carries no modality data, so the table is ours: the model families each provider
documents as taking images, matched on the model name. A model not in it (a local model behind
an OpenAI-compatible server, a new family) is taken as text only: it gets a note instead of the
photo, never an error. An operator names what a model takes in SIGIL_MODEL_CAPABILITIES
(JSON: {"openai/llava:13b": ["image"]}, fnmatch patterns allowed, e.g. "openai/qwen2.5-vl*").

Voice notes and documents reach every model as text (a transcript, the extracted text), which
memory can index and every model can read; the table's `audio` and `document` columns say what a
model would take natively, for the docs, and are not used to send files.

Image tokens follow each provider's published formula (docs/media.md, "Costs"):
- OpenAI tile models (gpt-4o, gpt-4.1, gpt-5, o1, o3): fit in 2048x2048, shortest side to 768,
  then 85 + 170 per 512 px tile (gpt-4o-mini bills 2833 + 5667 per tile);
- OpenAI patch models (gpt-4.1-mini, gpt-4.1-nano, o4-mini): 32 px patches, at most 1536 (the image
  scaled down to fit), times the model's multiplier (1.62, 2.46, 1.72);
- Claude, directly or on Bedrock, and every other model: long edge at most 1568 px and ~1.15
  megapixels, then width * height / 750 (Anthropic's vision guide), the estimate for the rest.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

Modality = Literal["image", "audio", "document"]
MODALITIES: Final[tuple[Modality, ...]] = ("image", "audio", "document")


@dataclass(frozen=True)
class Capabilities:
    image: bool = False
    audio: bool = False
    document: bool = False
    source: str = "default"  # "table", "override" or "default" (text only), for the docs and logs

    def takes(self, modality: Modality) -> bool:
        return bool(getattr(self, modality))


TEXT_ONLY: Final = Capabilities()

# (provider, model-name regex, what it takes); the first match wins, so the exceptions of a
# family come before the family.
_IMAGE: Final[frozenset[Modality]] = frozenset({"image"})
_IMAGE_PDF: Final[frozenset[Modality]] = frozenset({"image", "document"})
_CLAUDE: Final = r"claude-(3|opus-4|sonnet-4|haiku-4|[a-z]+-[4-9])"
_TABLE: Final[tuple[tuple[str, str, frozenset[Modality]], ...]] = (
    # OpenAI: text-only members of vision families first.
    ("openai", r"^(o1-mini|o3-mini|gpt-3\.5|gpt-4-(?!turbo|vision)|gpt-4$)", frozenset()),
    ("openai", r"^gpt-4o(-mini)?-(audio|realtime)", frozenset({"audio"})),
    (
        "openai",
        r"^(gpt-4o|chatgpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|gpt-4-turbo|gpt-4-vision|o1|o3|o4)",
        frozenset({"image"}),
    ),
    # Anthropic: every Claude 3 and later model sees images and reads PDFs.
    (
        "anthropic",
        r"^claude-(3|opus-4|sonnet-4|haiku-4|opus-5|sonnet-5|haiku-5|[a-z]+-[4-9])",
        frozenset({"image", "document"}),
    ),
    # Bedrock Converse: by the model id (or the inference profile's, e.g. us.anthropic...).
    (
        "bedrock",
        r"anthropic\.claude-(3|opus-4|sonnet-4|haiku-4|[a-z]+-[4-9])",
        frozenset({"image", "document"}),
    ),
    ("bedrock", r"amazon\.nova-micro", frozenset()),
    ("bedrock", r"amazon\.nova-(lite|pro|premier|2)", frozenset({"image", "document"})),
    ("bedrock", r"meta\.llama3-2-(11b|90b)|meta\.llama4", frozenset({"image"})),
    ("bedrock", r"mistral\.pixtral", frozenset({"image"})),
    # The test and benchmark model (shared.providers.function) is handed the whole request,
    # photos included.
    ("function", r"", frozenset({"image"})),
)


def capabilities(model_ref: str, overrides: Mapping[str, list[str]] | None = None) -> Capabilities:
    """What `model_ref` ("provider/model") takes: the operator's override (a ref or fnmatch
    pattern), else the table, else text only."""
    for pattern, named in (overrides or {}).items():
        if pattern == model_ref or fnmatch.fnmatchcase(model_ref, pattern):
            return _of(set(named), "override")
    provider, _, model = model_ref.partition("/")
    for family, regex, modalities in _TABLE:
        if provider == family and re.search(regex, model):
            return _of(set(modalities), "table")
    return TEXT_ONLY


def _of(named: set[str], source: str) -> Capabilities:
    return Capabilities(
        image="image" in named, audio="audio" in named, document="document" in named, source=source
    )


# ---------------------------------------------------------------- image tokens

# Used when the bytes say nothing of the size (a format we do not parse): a 1024 x 1024 photo.
UNKNOWN_SIZE: Final = (1024, 1024)

_OPENAI_PATCH_MULTIPLIERS: Final = (("gpt-4.1-mini", 1.62), ("gpt-4.1-nano", 2.46), ("o4-mini", 1.72))


def image_tokens(model_ref: str, width: int | None, height: int | None) -> int:
    """The prompt tokens one photo of this size costs on `model_ref` (an estimate to budget by;
    the provider's usage report is what is charged after the call)."""
    w, h = (width, height) if width and height else UNKNOWN_SIZE
    provider, _, model = model_ref.partition("/")
    if provider == "openai" and capabilities(model_ref).source == "table":
        for prefix, multiplier in _OPENAI_PATCH_MULTIPLIERS:
            if model.startswith(prefix):
                return math.ceil(_patches(w, h) * multiplier)
        if model.startswith("gpt-4o-mini"):
            return 2833 + 5667 * _tiles(w, h)
        return 85 + 170 * _tiles(w, h)
    return _claude_tokens(w, h)


def _tiles(width: int, height: int) -> int:
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))  # a small photo is not scaled up
    return math.ceil(w * scale / 512) * math.ceil(h * scale / 512)


def _patches(w: int, h: int) -> int:
    patches = math.ceil(w / 32) * math.ceil(h / 32)
    if patches <= 1536:
        return patches
    # Scaled down so that the whole patches fit in 1536 (OpenAI's vision guide).
    shrink = math.sqrt(32 * 32 * 1536 / (w * h))
    w_patches = w * shrink / 32
    shrink *= math.floor(w_patches) / w_patches
    return min(1536, math.ceil(w * shrink / 32) * math.ceil(h * shrink / 32))


def _claude_tokens(w: int, h: int) -> int:
    scale = min(1.0, 1568 / max(w, h), math.sqrt(1_150_000 / (w * h)))
    return math.ceil((w * scale) * (h * scale) / 750)
