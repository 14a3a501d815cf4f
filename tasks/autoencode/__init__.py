"""Task package: autoencode (sentence → encoder → plan vector → decoder regenerates it).

Data (`data.py`), BLEU (`metrics.py`) and the adapter (`adapter.py`)."""
