"""`build.py pull`: for training clusters. Resolve a cell to its published image, pull it (by digest when
one was recorded by `build.py publish` or given), and run verify on this node's GPU before declaring the
image ready. Exit codes for scripts: 0 ready; 1 verify failed (e.g. a silent fallback: an expected
extension missing) or the registry does not hold the digest (tampered or deleted: refused); 2 bad cell,
arguments or digest; 3 no daemon, no GPU runtime, or the pull failed after retries."""

from __future__ import annotations

from pathlib import Path

from toolchain.errors import UsageError
from toolchain.image import container_engine, container_verify, publish
from toolchain.image.container_engine import ImageInfo
from toolchain.image.registry_pull import PullFailed


def resolve(
    cell_id: str, registry: str | None, *, digest: str | None, by_digest: bool, out: Path
) -> tuple[str, str | None, dict | None]:
    """(ref to pull, digest or None, publish record or None). The digest comes from --digest, else from
    the cell's publish record (out/cells/<id>/published.json); --by-digest makes one mandatory."""
    record = publish.read_record(out, cell_id)
    if digest:
        publish.check_digest(digest, "--digest")
    elif record:
        if registry and record["repository"] != registry.rstrip("/"):
            raise UsageError(
                f"{publish.record_path(out, cell_id)} records a push to {record['repository']}, not "
                f"--registry {registry}; pass that registry, or --digest for this one"
            )
        digest, registry = record["digest"], record["repository"]
    if by_digest and not digest:
        raise UsageError(
            f"--by-digest: no digest for {cell_id} (no {publish.record_path(out, cell_id)}); run "
            "build.py publish first, or pass --digest sha256:..."
        )
    if not registry:
        raise UsageError("pull: no registry; pass --registry ghcr.io/OWNER/apex (or set APEX_IMAGE_REGISTRY)")
    repository = registry.rstrip("/")
    return (f"{repository}@{digest}" if digest else f"{repository}:{cell_id}"), digest, record


def pull_and_verify(
    ref: str,
    *,
    out_dir: Path,
    gpu: str,
    pull_first: bool = True,
    engine: str | None = None,
    expected_image_id: str | None = None,
    out_root: Path | None = None,
) -> tuple[int, Path, str | None]:
    """(verify exit code, report path, image id or None when the local image was used). A ref by digest
    is checked after the pull: the engine must list it among the image's repo digests, and the image id
    must be the published one (when known). `out_root`: verify_image's."""
    runtime = container_engine.get(engine)
    image_id = None
    if pull_first:
        try:
            info = runtime.pull(ref)
        except PullFailed as failure:
            refused = publish.refusal(failure.reason, ref) if "@sha256:" in ref else None
            if refused:
                raise refused from None
            raise
        image_id = info.id
        check_pulled(ref, info, expected_image_id)
    code, report_path = container_verify.verify_image(
        ref, out_dir=out_dir, gpu=gpu, engine=runtime, out_root=out_root
    )
    return code, Path(report_path), image_id


def check_pulled(ref: str, info: ImageInfo, expected_image_id: str | None) -> None:
    """What the engine says it pulled must be what was asked for: a ref by digest only when the image carries
    that very digest (the one whose signature was checked), and the published image id when one is known.
    Raises DigestRefused (exit 1); a ref by tag is not checked here (the signature step pins tags first)."""
    if "@" not in ref:
        return
    repository, _, digest = ref.partition("@")
    if f"{repository}@{digest}" not in info.repo_digests:  # pulled by platform and index digest: both
        raise publish.DigestRefused(
            f"refusing {ref}: the pulled image does not carry this digest "
            f"(repo digests: {', '.join(info.repo_digests) or 'none'})"
        )
    if expected_image_id and info.id != expected_image_id:
        raise publish.DigestRefused(
            f"refusing {ref}: its image id {info.id} is not the published {expected_image_id}"
        )
