"""Images and containers: BuildKit builds, the container engines, inspect, verify in a container,
publish/pull by digest, the verify zipapp."""
