#!/usr/bin/env bash
# Slurm Prolog (apex-toolchain): run verify in the job's container image, or on the node itself, before
# the job starts, and exit with verify's code. It drains nothing and cancels nothing on its own: what a
# non-zero exit does is the site's choice (Slurm drains the node and requeues the job when a Prolog
# exits non-zero; see docs/clusters.md, "Training clusters", for what to do with 1 and 3).
#
#   0  the image's Apex works on this node's GPU        2  this script or verify is misconfigured (the
#   1  the image failed verification (the image's fault)    line names the APEX_VERIFY_* setting)
#                                                       3  this node cannot run it (no GPU visible,
#                                                          driver too old for the image's CUDA, no runtime)
# 1 means verify ran and wrote its report: an exit 1 without one (a python that is not verify's) is 2.
#
# Configuration (environment; set them in the Prolog wrapper or slurm.conf's PrologEnv-style setup):
#   APEX_VERIFY_PYZ        the zipapp (`python build.py zipapp --out ...`), default /opt/apex-toolchain/verify.pyz
#   APEX_VERIFY_RUNTIME    host | enroot | apptainer (default: enroot when an image is set, else host)
#   APEX_VERIFY_IMAGE      the image: docker://REGISTRY#REPO@sha256:... or a .sqsh (enroot), a .sif or
#                          docker://... (apptainer). Default: $SPANK_PYXIS_CONTAINER_IMAGE, the job's
#                          --container-image where the site's Slurm exports SPANK options to the Prolog
#   APEX_VERIFY_PYTHON     the interpreter (default python3)
#   APEX_VERIFY_ARGS       verify's flags (default --require-gpu: a node without a usable GPU is exit 3)
#   APEX_VERIFY_REPORT_DIR where <job>-<host>.json/.md go (default /var/log/apex-verify)
set -uo pipefail

PYZ=${APEX_VERIFY_PYZ:-/opt/apex-toolchain/verify.pyz}
IMAGE=${APEX_VERIFY_IMAGE:-${SPANK_PYXIS_CONTAINER_IMAGE:-}}
RUNTIME=${APEX_VERIFY_RUNTIME:-}
PYTHON=${APEX_VERIFY_PYTHON:-python3}
REPORT_DIR=${APEX_VERIFY_REPORT_DIR:-/var/log/apex-verify}
read -r -a VERIFY_ARGS <<< "${APEX_VERIFY_ARGS:---require-gpu}"
JOB=${SLURM_JOB_ID:-nojob}
HOST=$(hostname -s 2>/dev/null || hostname)
NAME="${JOB}-${HOST}"

say() { echo "apex-verify prolog (job ${JOB} on ${HOST}): $*" >&2; }
misconfigured() { say "$*"; exit 2; }  # every setting is checked before anything runs

if [ -z "$RUNTIME" ]; then
  if [ -n "$IMAGE" ]; then RUNTIME=enroot; else RUNTIME=host; fi
fi
BUILD_IT="build it with 'python build.py zipapp --out ${PYZ:-/opt/apex-toolchain/verify.pyz}'"
[ -d "$PYZ" ] && misconfigured "APEX_VERIFY_PYZ=$PYZ is a directory, not the zipapp; point it at the file itself ($BUILD_IT)"
if [ -z "$PYZ" ] || [ ! -f "$PYZ" ] || [ ! -r "$PYZ" ]; then
  misconfigured "APEX_VERIFY_PYZ=$PYZ is not a readable file; $BUILD_IT"
fi
LC_ALL=C grep -q -a "verify/cli.py" "$PYZ" \
  || misconfigured "APEX_VERIFY_PYZ=$PYZ is not the verify zipapp (no verify/cli.py inside); $BUILD_IT"
for flag in "${VERIFY_ARGS[@]}"; do
  case "$flag" in
    --json|--json=*|--markdown|--markdown=*)
      misconfigured "APEX_VERIFY_ARGS has $flag: the prolog writes the reports itself (APEX_VERIFY_REPORT_DIR); drop it" ;;
  esac
done
if [ "$RUNTIME" = host ] && ! command -v "$PYTHON" >/dev/null 2>&1; then
  misconfigured "APEX_VERIFY_PYTHON=$PYTHON is not a command on this node; set it to the Python that has torch"
fi
if ! mkdir -p "$REPORT_DIR" 2>/dev/null || [ ! -w "$REPORT_DIR" ]; then
  say "APEX_VERIFY_REPORT_DIR=$REPORT_DIR is not a writable directory; point it at one"
  exit 2
fi
PYZ_DIR=$(cd "$(dirname "$PYZ")" && pwd)
PYZ_NAME=$(basename "$PYZ")
rm -f "$REPORT_DIR/$NAME.json" "$REPORT_DIR/$NAME.md"  # what is there afterwards, this run wrote

need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  say "APEX_VERIFY_RUNTIME=$RUNTIME needs '$1', which is not on PATH on this node"
  exit 3
}

case "$RUNTIME" in
  host)
    "$PYTHON" "$PYZ" "${VERIFY_ARGS[@]}" --json "$REPORT_DIR/$NAME.json" --markdown "$REPORT_DIR/$NAME.md"
    code=$?
    ;;
  enroot)
    [ -n "$IMAGE" ] || { say "APEX_VERIFY_RUNTIME=enroot needs APEX_VERIFY_IMAGE (or Pyxis' --container-image)"; exit 2; }
    need enroot
    case "$IMAGE" in
      *.sqsh) [ -f "$IMAGE" ] && [ -r "$IMAGE" ] || misconfigured "APEX_VERIFY_IMAGE=$IMAGE is not a readable .sqsh file" ;;
    esac
    container="apex-verify-${NAME}"
    workdir=$(mktemp -d "${TMPDIR:-/tmp}/apex-verify.XXXXXX") || exit 3
    trap 'enroot remove --force "$container" >/dev/null 2>&1; rm -rf "$workdir"' EXIT
    case "$IMAGE" in
      *.sqsh) squashfs=$IMAGE ;;
      *) squashfs="$workdir/image.sqsh"
         enroot import --output "$squashfs" "$IMAGE" >&2 || { say "enroot import $IMAGE failed"; exit 3; } ;;
    esac
    enroot create --name "$container" "$squashfs" >&2 || { say "enroot create from $squashfs failed"; exit 3; }
    enroot start --mount "$PYZ_DIR:/opt/apex-verify" --mount "$REPORT_DIR:/opt/apex-verify-report" "$container" \
      "$PYTHON" "/opt/apex-verify/$PYZ_NAME" "${VERIFY_ARGS[@]}" \
      --json "/opt/apex-verify-report/$NAME.json" --markdown "/opt/apex-verify-report/$NAME.md"
    code=$?
    ;;
  apptainer)
    [ -n "$IMAGE" ] || { say "APEX_VERIFY_RUNTIME=apptainer needs APEX_VERIFY_IMAGE (a .sif or docker://...)"; exit 2; }
    need apptainer
    case "$IMAGE" in
      *://*) ;;
      *) [ -f "$IMAGE" ] && [ -r "$IMAGE" ] || misconfigured "APEX_VERIFY_IMAGE=$IMAGE is not a readable image file (.sif)" ;;
    esac
    apptainer exec --nv --bind "$PYZ_DIR:/opt/apex-verify,$REPORT_DIR:/opt/apex-verify-report" "$IMAGE" \
      "$PYTHON" "/opt/apex-verify/$PYZ_NAME" "${VERIFY_ARGS[@]}" \
      --json "/opt/apex-verify-report/$NAME.json" --markdown "/opt/apex-verify-report/$NAME.md"
    code=$?
    ;;
  *)
    say "APEX_VERIFY_RUNTIME=$RUNTIME: unknown; use host, enroot or apptainer"
    exit 2
    ;;
esac

# verify's own codes are 0-3; anything else (a crash, a runtime's own failure) means it could not run here
if [ "$code" = 126 ] || [ "$code" = 127 ]; then
  misconfigured "APEX_VERIFY_PYTHON=$PYTHON could not be run (exit $code: not found or not executable$(
    [ "$RUNTIME" = host ] || echo " in the image")); set APEX_VERIFY_PYTHON to the Python that has torch"
fi
if { [ "$code" = 0 ] || [ "$code" = 1 ]; } && [ ! -s "$REPORT_DIR/$NAME.json" ]; then
  misconfigured "exit $code without a report from verify: $PYTHON did not run verify (check APEX_VERIFY_PYZ and APEX_VERIFY_PYTHON)"
fi
case "$code" in
  0) say "PASS (report $REPORT_DIR/$NAME.json)" ;;
  1) say "FAIL: the image failed verification (report $REPORT_DIR/$NAME.json)" ;;
  2) say "verify refused its input (exit 2); check APEX_VERIFY_ARGS" ;;
  3) say "this node cannot run the image (exit 3: no usable GPU or driver too old; report $REPORT_DIR/$NAME.json)" ;;
  *) say "verify did not run to the end (exit $code); treating it as exit 3"; code=3 ;;
esac
exit "$code"
