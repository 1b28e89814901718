"""`python -m verify bench`: what Apex really adds over today's PyTorch, measured on this GPU.

A staged training benchmark on a small GPT-style model (torch Adam -> FusedAdam -> FusedLayerNorm ->
bf16 autocast, beside the native alternatives) and kernel microbenchmarks (optimizer step, norm
forward+backward) whose effective bandwidth is compared with the device's measured copy bandwidth.
Depends on the standard library and torch; matplotlib is optional (plots).
"""
