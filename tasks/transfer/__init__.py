"""Task package: transfer."""
