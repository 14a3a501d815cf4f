"""Moving a batch to the device the model is on.

Its own module because the trainer (tasks/training.py), the adapters' evaluation
(tasks/base.py) and the gradient analyses (tasks/analysis/gradients.py) all move batches, and
none of them should import another for it (the trainer imports the other two).
"""

from __future__ import annotations

from typing import Any

import torch


def to_device(batch: Any, device: torch.device | str) -> Any:
    """Move a batch (tensor, or dict/list/tuple of tensors) to `device`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch
