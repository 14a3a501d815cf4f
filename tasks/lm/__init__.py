"""Task package: lm."""
