"""Model cards and Hub helpers (saving complete repositories, pushing, remote code)."""

from .convert_official import convert_official_checkpoint
from .model_card import render_model_card
from .sharing import enable_remote_code, push_to_hub, save_for_hub

__all__ = ["convert_official_checkpoint", "enable_remote_code", "push_to_hub", "render_model_card", "save_for_hub"]
