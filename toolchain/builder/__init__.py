"""What runs inside the build image (Python >= 3.10, standard library + verify only: no tomllib, no
Docker SDK; tests/unit/test_builder_boundary.py checks it): Apex source -> wheel + build manifest."""
