"""tprbench: only where scikit-learn is not installed (the GPU image): sklearn.utils.shuffle for lists, as
sklearn 1.x computes it (check_random_state(int) -> RandomState(seed); resample: arange, shuffle, index)."""
import numpy as np


def shuffle(*arrays, random_state=None, n_samples=None):
    rs = random_state if isinstance(random_state, np.random.RandomState) else np.random.RandomState(random_state)
    n = len(arrays[0])
    indices = np.arange(n)
    rs.shuffle(indices)
    indices = indices[: n_samples or n]
    out = [[a[i] for i in indices] for a in arrays]
    return out[0] if len(out) == 1 else out
