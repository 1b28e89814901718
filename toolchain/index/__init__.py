"""The per-stack wheel index: checks before publishing, the PEP 503/691 pages, the writer, a localhost server."""
