"""Sentiment of crypto headlines: a fine-tuned all-MiniLM-L6-v2 shipped as a small delta over the packaged encoder.

    from models.sentiment import load_model, article_text
    model = load_model()
    model.predict([article_text(title, summary)])[0].label

Importing this package is cheap; torch/transformers load on the first `load_model()`.
"""

from models.sentiment.errors import ModelLoadError
from models.sentiment.model import (
    TOKEN_BUDGET,
    OnFirstUse,
    Prediction,
    SentimentModel,
    article_text,
    build_model,
    load_model,
)

__all__ = [
    "TOKEN_BUDGET",
    "ModelLoadError",
    "OnFirstUse",
    "Prediction",
    "SentimentModel",
    "article_text",
    "build_model",
    "load_model",
]
