"""Data sources and the resumable, rank-aware plan for reading them."""
