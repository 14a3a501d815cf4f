"""Task package: logic."""
