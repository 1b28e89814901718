"""A matrix run: the per-cell run loop and its results folder, and the matrix report built from it."""
