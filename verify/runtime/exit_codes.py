"""Exit codes shared by every CLI of the project (verify, build.py)."""

OK = 0  # everything verified / built
FAILED = 1  # a verification or a build failed
USAGE = 2  # bad input: arguments, matrix file, manifest
ENVIRONMENT = 3  # something the run needs is unavailable: Docker daemon, GPU, disk

MEANINGS = {
    OK: "pass",
    FAILED: "a verification or build failed",
    USAGE: "usage or configuration error",
    ENVIRONMENT: "environment unavailable (no GPU / Docker daemon / disk)",
}
