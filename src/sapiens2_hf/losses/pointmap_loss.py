"""Pointmap loss of the official Sapiens2 recipe.

Kept import path: implemented in `sapiens2_hf.modeling.loss_sapiens2`.
"""

from ..modeling.loss_sapiens2 import (  # noqa: F401
    PointmapLoss,
    intrinsics_consistency,
    multiscale_l1,
    pointmap_normal_loss,
    pointmap_normals,
    shift_invariant_l1,
    silog,
)
