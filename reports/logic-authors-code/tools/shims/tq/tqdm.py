"""tprbench: an empty tqdm for `from tqdm import *` (main_logical.py imports it, uses none of it)."""
