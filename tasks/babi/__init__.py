"""bAbI QA tasks 1–20 (Weston et al. 2015) for the TPR-RNN (Schlag & Schmidhuber 2018): the reader (data.py)."""
