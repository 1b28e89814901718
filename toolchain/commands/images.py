"""The commands over images: verify (any image), inspect, pull (and verify on this node), publish, and the
verify zipapp that audits any image."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from toolchain.commands.cells import built_cell, resolve_cells
from toolchain.commands.parts import check_registry, load_part, require_docker, require_engine
from toolchain.console import Console
from toolchain.errors import UsageError
from toolchain.image import signature
from toolchain.spec import ci_matrix
from verify.checks import Status
from verify.report import reader as verify_report
from verify.runtime import atomic, exit_codes, input_files
from verify.runtime.messages import printable


def failing_checks(report_path: Path | str | None, limit: int = 20) -> list[str]:
    """`FAIL id  summary` for each FAIL/WARN check of a verify report (bounded read); [] when none is readable."""
    if not report_path:
        return []
    try:
        report = verify_report.read(report_path)
    except input_files.InputFileError:
        return []
    lines = [
        f"{c.status.value}  {c.id}  {c.summary}"
        for c in report.checks
        if c.status in (Status.FAIL, Status.WARN)
    ]
    return lines[:limit] + ([f"... {len(lines) - limit} more in the report"] if len(lines) > limit else [])


def cmd_verify(args: argparse.Namespace, console: Console) -> int:
    if not args.image:  # the tag `build.py image` with the same options made (NVIDIA's or the local route's)
        args.image = built_cell(resolve_cells(args, all_when_empty=False)[0], args.base, args, console).id
    container_verify = load_part("image.container_verify")
    out_dir = args.out / "verify" / _safe_name(args.image)
    container_verify.OwnedOut.of(out_dir, args.out).check()  # a link planted in --out: before the engine
    require_engine(args.engine)

    with console.group(f"verify {args.image}"):
        code, report_path = container_verify.verify_image(
            args.image,
            out_dir=out_dir,
            gpu=args.gpu,
            verify_from=args.verify_from,
            engine=args.engine,
            out_root=args.out,
        )
    word, kind = ("PASS", "ok") if code == exit_codes.OK else ("FAIL", "fail")
    console.status(word, kind, f"{args.image}: verify exit {code}; report {report_path}")
    for line in failing_checks(report_path) if code != exit_codes.OK else ():
        console.line(printable(f"  {line}"))
    audit = _audit_of(out_dir)
    if audit:
        console.line(
            printable(
                f"  audited {audit['image']} (image id {audit['image_id']}, digest {audit['digest'] or 'none: local'})"
                f" with {audit['engine']}, verify from {audit['verify_from']}"
            )
        )
    return code


def _audit_of(out_dir: Path) -> dict[str, Any] | None:
    try:
        run = input_files.read_json(out_dir / "container-run.json", input_files.CELL_RESULT)
    except input_files.InputFileError:
        return None
    audit = run.get("audit") if isinstance(run, dict) else None
    return audit if isinstance(audit, dict) else None


def cmd_inspect(args: argparse.Namespace, console: Console) -> int:
    inspect_image = load_part("image.inspect_image")
    require_docker()

    print(atomic.json_dumps(inspect_image.inspect(args.image), indent=2, default=str))
    return exit_codes.OK


def cmd_pull(args: argparse.Namespace, console: Console) -> int:
    from toolchain.image import pull, registry_pull
    from toolchain.runs import run_loop
    from toolchain.runs.cell_result import BuildRecord, CellFields, CellResult, CellStatus, VerifyRecord
    from toolchain.timestamps import now

    check_registry(args)
    cell = resolve_cells(args, all_when_empty=False)[0]
    if not args.registry and not args.no_pull and not args.by_digest and not args.digest:
        from toolchain.image import publish

        if publish.read_record(args.out, cell.id) is None:
            raise UsageError(
                "pull: no registry; pass --registry ghcr.io/OWNER/apex (or set APEX_IMAGE_REGISTRY), "
                "or --no-pull to verify a local image"
            )
    signed: dict | None = None
    if args.no_pull:
        ref, digest, record = ci_matrix.image_ref(cell, args.registry), None, None
    else:
        ref, digest, record = pull.resolve(
            cell.id, args.registry, digest=args.digest, by_digest=args.by_digest, out=args.out
        )
        policy = signature.Policy.from_options(
            identity=args.signature_identity,
            issuer=args.signature_issuer,
            key=args.signature_key,
            off=args.no_signature_check,
            repository=registry_pull.split_ref(ref)[0],
        )
    out_dir = args.out / "cells" / cell.id / "verify"
    load_part("image.container_verify").OwnedOut.of(out_dir, args.out).check()  # before the engine
    require_engine(args.engine)
    if not args.no_pull:
        ref, digest, signed = _signature_first(ref, digest, policy, console)
    started = now()
    expected_id = (record or {}).get("image_id") if record and digest == record.get("digest") else None
    with console.group(f"{'verify' if args.no_pull else 'pull and verify'} {ref}"):
        code, report_path, image_id = pull.pull_and_verify(
            ref,
            out_dir=out_dir,
            gpu=args.gpu,
            pull_first=not args.no_pull,
            engine=args.engine,
            expected_image_id=expected_id,
            out_root=args.out,
        )
    # recorded like a matrix cell, so `build.py report` shows what this node verified
    status = CellStatus.VERIFIED if code == exit_codes.OK else CellStatus.VERIFY_FAILED
    verify = run_loop.with_report(
        VerifyRecord(exit_code=code, mode_requested=args.gpu, status=status), report_path
    )
    run_loop.save_result(
        CellResult(
            id=cell.id,
            name=cell.name,
            run_id="pull",
            cell=CellFields.from_json(cell.to_json()),
            status=status,
            started_at=started,
            finished_at=now(),
            verify=verify,
            build=BuildRecord(
                ok=True, tag=ref, digest=digest, pulled=not args.no_pull, image_id=image_id, signature=signed
            ),
        ),
        args.out,
    )
    if code == exit_codes.OK:
        console.status("READY", "ok", f"{ref} (report {report_path})")
    else:
        console.error(
            f"{ref} is not ready: verify exit {code}; report {report_path}", title=f"pull {cell.id}"
        )
    return code


def _signature_first(
    ref: str, digest: str | None, policy: signature.Policy, console: Console
) -> tuple[str, str | None, dict]:
    """Check the signature of what is about to be pulled; a tag is first resolved to its digest, and that
    digest is what gets pulled (the tag may move in between)."""
    from toolchain.image import registry_api, registry_pull

    repository, _ = registry_pull.split_ref(ref)
    if policy.kind == "off":
        console.status("UNSIGNED", "warn", f"{ref}: signature not checked (--no-signature-check)")
        return ref, digest, signature.check(repository, digest or "", policy)
    if digest is None:
        try:
            digest = registry_api.Registry(repository).get_manifest(registry_pull.split_ref(ref)[1]).digest
        except registry_api.NotFound:
            raise UsageError(
                f"{ref}: the registry has no such tag; check --registry and the cell, or publish it"
            ) from None
        ref = f"{repository}@{digest}"
    found = signature.check(repository, digest, policy)
    console.status(
        "SIGNED",
        "ok",
        f"{ref}: {found['policy']} signature verified"
        + (f" ({found['identity']})" if found.get("identity") else f" ({found.get('key')})"),
    )
    return ref, digest, found


def cmd_publish(args: argparse.Namespace, console: Console) -> int:
    from toolchain.image import publish

    cell = resolve_cells(args, all_when_empty=False)[0]
    if not args.registry:
        raise UsageError(
            "publish: no registry; pass --registry ghcr.io/OWNER/apex (or set APEX_IMAGE_REGISTRY)"
        )
    repository = args.registry.rstrip("/")
    if args.bake_metadata:
        record = publish.from_bake_metadata(
            cell.id,
            ci_matrix.bake_target_name(cell),
            repository,
            args.bake_metadata,
            out=args.out,
            platform=cell.platform,
        )
    else:
        with console.group(f"publish {cell.id} to {repository}"):
            record = publish.push(cell.id, repository, out=args.out, local=args.image, platform=cell.platform)
    console.status("PUSHED", "ok", f"{record['ref']} (recorded in {publish.record_path(args.out, cell.id)})")
    return exit_codes.OK


def cmd_publish_index(args: argparse.Namespace, console: Console) -> int:
    """`build.py publish-index`: each selected stack's platforms under its one tag (an OCI index); the refs
    made go to --refs-out for the signing step. Exit 1 when any stack could not be indexed (the rest are)."""
    from toolchain.commands.cells import selected
    from toolchain.image import publish

    check_registry(args)
    if not args.registry:
        raise UsageError(
            "publish-index: no registry; pass --registry ghcr.io/OWNER/apex (or set APEX_IMAGE_REGISTRY)"
        )
    repository = args.registry.rstrip("/")
    made, problems = publish.publish_indexes(selected(args), repository, out=args.out)
    for index in made:
        platforms = ", ".join(f"{platform} {digest[:19]}" for platform, digest in index["platforms"].items())
        console.status("INDEXED", "ok", f"{repository}:{index['tag']} -> {index['ref']} ({platforms})")
    for problem in problems:
        console.error(problem, title="publish-index")
    if args.refs_out:
        atomic.write_text(args.refs_out, "".join(index["ref"] + "\n" for index in made))
    return exit_codes.FAILED if problems else exit_codes.OK


def cmd_ccache(args: argparse.Namespace, console: Console) -> int:
    """`build.py ccache import|export --cell X --dir DIR`: the carry builds around a bake build in CI."""
    buildkit_build = load_part("image.buildkit_build")
    cell = resolve_cells(args, all_when_empty=False)[0]
    ccache_carry = load_part("image.ccache_carry")
    ccache_carry.check_dir(args.dir, "--dir")
    require_docker()
    log_path = args.logs / cell.id / f"ccache-{args.direction}.log"
    with console.group(f"ccache {args.direction} {cell.id} ({args.dir})"):
        result = buildkit_build.carry_ccache(
            cell,
            args.direction,
            ccache_dir=args.dir,
            mount=args.ccache_mount,
            log_path=log_path,
            extra_ca=args.extra_ca,
            progress=args.progress,
            log_root=args.logs,
        )
    carried = result.ccache_carried or {}
    seen = carried.get("after" if args.direction == "export" else "before") or {}
    if not result.ok:
        console.error(
            f"ccache {args.direction} failed in {result.stage_failed or 'the build'}; see {log_path}",
            title=f"ccache {cell.id}",
        )
        return exit_codes.FAILED
    console.status(
        "OK",
        "ok",
        f"ccache {args.direction}: {seen.get('files', 0)} files, {seen.get('bytes', 0)} bytes "
        f"in {args.dir} ({carried.get('mount')} cache mount, {result.duration_s} s)",
    )
    return exit_codes.OK


def cmd_clean(args: argparse.Namespace, console: Console) -> int:
    """`build.py clean [--dry-run]`: the project's images and the BuildKit cache its builds made
    (toolchain/image/clean.py says what counts as ours)."""
    import docker

    from toolchain.image import clean
    from toolchain.spec import compat

    require_docker()
    client = docker.from_env(timeout=120)
    plan = clean.select(
        client.api.images(),
        client.df().get("BuildCache") or [],
        [base.image for base in compat.load().local_bases.values()],
    )
    for item in plan.images:
        console.line(printable(f"  image  {item.what} ({clean.human(item.size)})"))
    console.line(f"  build cache: {len(plan.cache)} records of the project's builds")
    if args.dry_run:
        console.line(
            printable(
                f"would remove {len(plan.images)} images and {len(plan.cache)} cache records, about "
                f"{clean.human(plan.size)} (--dry-run: nothing removed)"
            )
        )
        return exit_codes.OK

    def prune(record_id: str) -> int:
        # the SDK's stubs list only dangling/until; the engine's /build/prune takes id (one value a call)
        done = client.api.prune_builds(filters={"id": [record_id]}, all=True)  # type: ignore[arg-type]
        return int(done.get("SpaceReclaimed") or 0)

    freed, problems = clean.remove(plan, lambda image: client.api.remove_image(image), prune)
    for problem in problems:
        console.error(f"{problem}; remove it by hand (docker rmi / docker builder prune)", title="clean")
    console.status(
        "CLEAN",
        "warn" if problems else "ok",
        f"removed {len(plan.images) - sum(p.startswith('image') for p in problems)} images and "
        f"{clean.human(freed)} of build cache; the rest of the cache (base layers) goes with `docker builder prune`",
    )
    return exit_codes.FAILED if problems else exit_codes.OK


def cmd_zipapp(args: argparse.Namespace, console: Console) -> int:
    from toolchain.image import verify_zipapp

    if args.out.exists() and not args.out.is_dir() and not args.out.is_file():
        raise UsageError(
            f"--out {args.out}: not a regular file or directory; pass a path like DIR/verify.pyz"
        )
    app = verify_zipapp.build(args.out)
    console.line(
        printable(
            f"{app.path}: verify zipapp, {len(app.files)} files, {app.size_bytes} bytes, sha256 {app.sha256}"
        )
    )
    console.line(printable(f"  run it with any Python >= 3.10 that has torch: python {app.path} --static"))
    return exit_codes.OK


def cmd_verify_wheel(args: argparse.Namespace, console: Console) -> int:
    from toolchain.image import verify_wheel

    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out}: not a directory; pass the folder to write the wheel into")
    wheel = verify_wheel.build(args.out)
    console.line(
        printable(
            f"{wheel.path}: apex-verify wheel, {wheel.files} files, {wheel.size_bytes} bytes, sha256 {wheel.sha256}"
        )
    )
    console.line(
        printable(f"  install it where torch is: pip install {wheel.path}; then apex-verify --static")
    )
    return exit_codes.OK


def _safe_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "_.-" else "_" for ch in text)
