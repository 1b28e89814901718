"""toolchain: turn a matrix cell (CUDA x torch x Python x archs x Apex ref) into a verified image."""
