"""Fine-tuning the encoder + head, and combining several seeds (weight averaging or distillation)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from tqdm import tqdm

from models.sentiment.data import LABELS, Example
from models.sentiment.net import SentimentNet, load_encoder, pad_batch


@dataclass(frozen=True)
class Recipe:
    epochs: int = 4
    lr: float = 8e-5
    head_lr: float = 1e-3
    batch_size: int = 32
    warmup: float = 0.1  # fraction of steps with linear warm-up, then linear decay to 0
    weight_decay: float = 0.01
    max_tokens: int = 64
    dropout: float = 0.1
    head_seed: int = 0  # same head initialisation for every seed, so the seeds' weights can be averaged
    distil_alpha: float = 0.5  # weight of the teacher's soft targets when distilling
    train_word_embeddings: bool = False  # tuned too: the delta then stores them (about 11.8 MB more, int8)

    def as_dict(self) -> dict[str, float | int | bool]:
        return asdict(self)


def tokenize(tokenizer, texts: Sequence[str], max_tokens: int) -> list[list[int]]:
    return tokenizer(list(texts), truncation=True, max_length=max_tokens)["input_ids"]


def new_net(recipe: Recipe) -> SentimentNet:
    torch.manual_seed(recipe.head_seed)
    net = SentimentNet(load_encoder(), dropout=recipe.dropout)
    # the word embeddings stay frozen unless the recipe says: they are most of the parameters and then ship in the delta
    net.encoder.embeddings.word_embeddings.weight.requires_grad_(recipe.train_word_embeddings)
    return net


def fine_tune(
    net: SentimentNet,
    tokenizer,
    train: Sequence[Example],
    recipe: Recipe,
    seed: int,
    soft_targets: torch.Tensor | None = None,
    desc: str = "train",
) -> SentimentNet:
    """Train in place. With `soft_targets` (n x 3 probabilities) the loss mixes them with the gold labels."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    encoded = tokenize(tokenizer, [e.text for e in train], recipe.max_tokens)
    gold = torch.tensor([LABELS.index(e.label) for e in train])
    steps_per_epoch = math.ceil(len(train) / recipe.batch_size)
    total = steps_per_epoch * recipe.epochs
    warmup = max(1, int(total * recipe.warmup))

    head_params = list(net.head.parameters())
    no_decay = [p for n, p in net.encoder.named_parameters() if p.requires_grad and (p.dim() == 1)]
    decay = [p for n, p in net.encoder.named_parameters() if p.requires_grad and p.dim() > 1]
    optim = torch.optim.AdamW(
        [
            {"params": decay, "lr": recipe.lr, "weight_decay": recipe.weight_decay},
            {"params": no_decay, "lr": recipe.lr, "weight_decay": 0.0},
            {"params": head_params, "lr": recipe.head_lr, "weight_decay": 0.0},
        ]
    )
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total - s) / max(1, total - warmup))
    )
    net.train()
    order = list(range(len(train)))
    with tqdm(total=total, desc=desc, unit="step", leave=False) as bar:
        for _ in range(recipe.epochs):
            rng.shuffle(order)
            for start in range(0, len(order), recipe.batch_size):
                idx = order[start : start + recipe.batch_size]
                ids, mask = pad_batch([encoded[i] for i in idx], tokenizer.pad_token_id)
                logits = net(ids, mask)
                loss = F.cross_entropy(logits, gold[idx])
                if soft_targets is not None:
                    soft = F.kl_div(F.log_softmax(logits, -1), soft_targets[idx], reduction="batchmean")
                    loss = (1 - recipe.distil_alpha) * loss + recipe.distil_alpha * soft
                optim.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                optim.step()
                sched.step()
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.3f}")
    net.eval()
    return net


@torch.inference_mode()
def predict_proba(net: SentimentNet, tokenizer, texts: Sequence[str], max_tokens: int, batch: int = 64) -> torch.Tensor:
    net.eval()
    encoded = tokenize(tokenizer, texts, max_tokens)
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
    out = torch.zeros((len(texts), len(LABELS)))
    for start in range(0, len(order), batch):
        idx = order[start : start + batch]
        ids, mask = pad_batch([encoded[i] for i in idx], tokenizer.pad_token_id)
        out[idx] = torch.softmax(net(ids, mask).float(), -1)
    return out


def average_states(states: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Uniform weight average ("model soup") of runs fine-tuned from the same initialisation."""
    return {
        k: (sum(s[k].float() for s in states) / len(states)).to(states[0][k].dtype)
        if states[0][k].is_floating_point()
        else states[0][k]
        for k in states[0]
    }
