"""Array types of the public estimator signatures (inputs take anything ``np.asarray`` reads)."""

from __future__ import annotations

from typing import Any, Callable, Hashable, Sequence, Union

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float32]  # advantages, returns, scores: float32 [N]
LabelArray = NDArray[np.int64]  # step-group labels: int64 [N]
# The observation each row acted in: str for similarity grouping, any hashable-convertible value for exact.
Anchors = Union[Sequence[Any], NDArray[Any]]
AnchorKey = Callable[[Any], Hashable]

__all__ = ["AnchorKey", "Anchors", "ArrayLike", "FloatArray", "LabelArray"]
