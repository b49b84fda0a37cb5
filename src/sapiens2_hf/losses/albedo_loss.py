"""Albedo loss of the official Sapiens2 recipe.

Kept import path: implemented in `sapiens2_hf.modeling.loss_sapiens2`.
"""

from ..modeling.loss_sapiens2 import AlbedoLoss, chromaticity  # noqa: F401
