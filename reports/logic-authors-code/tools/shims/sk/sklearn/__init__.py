__version__ = "shim (tprbench)"
