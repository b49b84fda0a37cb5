"""KoLeo regulariser: spreads the features of a batch uniformly over the unit sphere.

Kozachenko-Leonenko differential-entropy estimator, used by DINOv2 (Oquab et al. 2023, arXiv 2304.07193; reference
implementation facebookresearch/dinov2 `dinov2/loss/koleo_loss.py`; original estimator Sablayrolles et al. 2019,
arXiv 1806.03198). The nearest neighbour is found with a torch matrix product, not Faiss, so it runs on any device.
"""

import torch
import torch.nn.functional as F
from torch import nn


class KoLeoLoss(nn.Module):
    r"""`-mean_i log(d_i + eps)`, with `d_i` the distance from L2-normalised feature `i` to its nearest neighbour
    in the batch.

    Distances follow `torch.nn.PairwiseDistance(p=2, eps=eps)` (eps, DINOv2's 1e-8, added to the difference), as in
    DINOv2. A batch of fewer than two samples has no neighbour: the loss is then 0 (no gradient).

    Example:
        >>> KoLeoLoss()(torch.randn(8, 32))
    """

    def __init__(self, eps: float = 1e-8):
        super().__init__()
        self.eps = eps

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """`(batch_size, hidden_size)` features (e.g. the student's CLS tokens of one view) -> `()` float32."""
        if features.ndim != 2:
            raise ValueError(f"`features` must have shape (batch_size, hidden_size), got {tuple(features.shape)}.")
        if features.shape[0] < 2:
            return features.new_zeros((), dtype=torch.float32)
        normalised = F.normalize(features.float(), p=2, dim=-1, eps=self.eps)
        with torch.no_grad():
            similarity = normalised @ normalised.T  # (batch_size, batch_size)
            similarity.fill_diagonal_(-2.0)  # below any cosine, so a sample is never its own neighbour
            neighbour = similarity.argmax(dim=1)  # (batch_size,)
        distances = torch.linalg.vector_norm(normalised - normalised[neighbour] + self.eps, dim=-1)
        return -torch.log(distances + self.eps).mean()
