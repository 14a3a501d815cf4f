"""tprbench task adapters: data → batches, the architecture around a unit, losses and metrics.

Knows units only through the registry interface (`units.build`); knows nothing of Ray.
"""
