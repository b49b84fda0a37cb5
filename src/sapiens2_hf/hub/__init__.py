"""Model cards and Hub helpers."""

from .model_card import render_model_card

__all__ = ["render_model_card"]
