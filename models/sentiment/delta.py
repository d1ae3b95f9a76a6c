"""The shipped weights as a delta over the packaged encoder.

Format (safetensors): for every fine-tuned 2-D encoder tensor, (fine-tuned - base) quantized to int8 with one
fp32 scale per row (`<name>.q`, `<name>.scale`); 1-D tensors (biases, LayerNorm) as an fp16 difference
(`<name>.d`); the classifier head in fp32 (`head.weight`, `head.bias`). Tensors equal to the base (the frozen
word embeddings) are not stored. A JSON config beside it records the delta's sha256, the base it applies to,
the label order, pooling, the token budget and the training recipe.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from models.sentiment.errors import ModelLoadError

if TYPE_CHECKING:  # torch loads only where tensors are read or written: a version check needs none
    import torch

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
DELTA_FILE = "sentiment-delta.safetensors"
CONFIG_FILE = "sentiment-delta.json"
FORMAT = "cryptowire-sentiment-delta/1"
ENC = "encoder."


def encode_delta(base: dict[str, torch.Tensor], tuned: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tensors to store for the encoder state dict `tuned` relative to `base` (same keys)."""
    import torch

    out: dict[str, torch.Tensor] = {}
    for name, weight in tuned.items():
        if not weight.is_floating_point():
            continue  # buffers such as position_ids
        diff = weight.float() - base[name].float()
        if not torch.any(diff):
            continue
        key = ENC + name
        if diff.dim() == 2:
            scale = diff.abs().amax(dim=1, keepdim=True) / 127.0
            scale = torch.where(scale > 0, scale, torch.ones_like(scale))
            out[key + ".q"] = torch.round(diff / scale).clamp(-127, 127).to(torch.int8).contiguous()
            out[key + ".scale"] = scale.squeeze(1).contiguous()
        else:
            out[key + ".d"] = diff.to(torch.float16).contiguous()
    return out


def apply_delta(base: dict[str, torch.Tensor], delta: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The encoder state dict rebuilt from the base and the stored delta."""
    state = {name: tensor.clone() for name, tensor in base.items()}
    for key, tensor in delta.items():
        if not key.startswith(ENC):
            continue
        name, kind = key[len(ENC) :].rsplit(".", 1)
        if name not in state:
            raise ModelLoadError(f"the delta names a tensor the base encoder lacks: {name}; retrain the delta")
        if kind == "q":
            scale = delta[ENC + name + ".scale"].unsqueeze(1)
            state[name] = state[name] + tensor.float() * scale
        elif kind == "d":
            state[name] = state[name] + tensor.float()
    return state


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_delta(
    directory: Path, tensors: dict[str, torch.Tensor], config: dict[str, Any]
) -> tuple[Path, Path]:
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    delta_path = directory / DELTA_FILE
    save_file(tensors, str(delta_path), metadata={"format": FORMAT})
    config = dict(config)
    config["format"] = FORMAT
    config["delta"] = {
        "file": DELTA_FILE,
        "sha256": sha256_file(delta_path),
        "bytes": delta_path.stat().st_size,
        "encoding": "2-D tensors: int8 difference, fp32 scale per row; 1-D: fp16 difference; head: fp32",
    }
    config_path = directory / CONFIG_FILE
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return delta_path, config_path


def read_delta(directory: Path = WEIGHTS_DIR) -> tuple[dict[str, torch.Tensor], dict[str, Any], str]:
    """(tensors, config, version) after checking the delta's checksum against its config."""
    from safetensors.torch import load_file

    config, version = check_delta(directory)
    return load_file(str(directory / config["delta"]["file"])), config, version


def check_delta(directory: Path = WEIGHTS_DIR) -> tuple[dict[str, Any], str]:
    """(config, version) after checking the delta's checksum against its config, without loading torch."""
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        raise ModelLoadError(
            f"the sentiment model config {config_path} is missing; restore it from git "
            "(`git checkout -- models/sentiment/weights`) or retrain with `python -m models.train`"
        )
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{config_path} is not valid JSON ({exc}); restore it from git or retrain") from exc
    if config.get("format") != FORMAT:
        raise ModelLoadError(f"{config_path} has format {config.get('format')!r}, expected {FORMAT!r}; retrain")
    delta_path = directory / config["delta"]["file"]
    if not delta_path.is_file():
        raise ModelLoadError(
            f"the sentiment delta weights {delta_path} are missing; restore them from git "
            "(`git checkout -- models/sentiment/weights`) or retrain with `python -m models.train`"
        )
    data = delta_path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != config["delta"]["sha256"]:
        raise ModelLoadError(
            f"checksum mismatch for {delta_path}: sha256 {digest[:12]}… but the config records "
            f"{config['delta']['sha256'][:12]}…; the file is corrupt or does not belong to this config. "
            "Restore both files from git or retrain with `python -m models.train`"
        )
    version = hashlib.sha256(data + config_path.read_bytes()).hexdigest()[:12]
    return config, version
