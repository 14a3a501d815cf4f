"""Task package: nli."""
