"""Task package: autoencode (sentence → encoder → plan vector → decoder regenerates it).

Data and metrics so far; the adapter comes with the new training loop."""
