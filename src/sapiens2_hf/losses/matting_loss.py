"""Matting loss: alpha L1 + gradient + Laplacian pyramid + pre-multiplied foreground L1.

Kept import path: implemented in `sapiens2_hf.modeling.loss_sapiens2`.
"""

from ..modeling.loss_sapiens2 import MattingLoss, laplacian_pyramid  # noqa: F401
