"""Conversion of official Sapiens2 checkpoint files into Hugging Face folders."""

from .official import convert_official_checkpoint, official_checkpoint_kind

__all__ = ["convert_official_checkpoint", "official_checkpoint_kind"]
