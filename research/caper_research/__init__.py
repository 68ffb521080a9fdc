"""Experiments beside the product (research/README.md): they import caper_train, nothing in
caper_train or src/ imports them. Run with PYTHONPATH=training:research."""
