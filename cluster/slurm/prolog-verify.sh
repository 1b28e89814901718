#!/usr/bin/env bash
# The verify hook (apex-toolchain) of a Slurm Prolog and of a Kubernetes initContainer: one script for both,
# so both check their settings the same way. It runs verify in the job's container image, or on the node
# (in a pod: in the pod's own container) before the job starts, and exits with verify's code. It drains
# nothing and cancels nothing on its own: what a non-zero exit does is the site's choice (Slurm drains the
# node and requeues the job when a Prolog exits non-zero; see docs/clusters.md, "Training clusters").
#
#   0  the image's Apex works on this node's GPU        2  this hook or verify is misconfigured (the
#   1  the image failed verification (the image's fault)    line names the APEX_VERIFY_* setting)
#                                                       3  this node cannot run it (no GPU visible,
#                                                          driver too old for the image's CUDA, no runtime)
# 1 means verify ran and wrote its report: an exit 1 without one (a python that is not verify's) is 2.
# A signal (SIGTERM from Slurm or the kubelet, Ctrl-C, SIGHUP) is also 1, as for every CLI of the project:
# the hook forwards SIGTERM to verify, waits for it (at most 10 s, then SIGKILL), removes this run's reports
# and says so in one line; no process of it is left and no report is written afterwards.
#
# Configuration (environment; Slurm: the Prolog wrapper or slurm.conf's PrologEnv-style setup; Kubernetes:
# the initContainer's env, cluster/kubernetes/verify-init-pod.yaml). Unset and empty mean the default:
#   APEX_VERIFY_PYZ         the zipapp (`python build.py zipapp --out ...`), default /opt/apex-toolchain/verify.pyz
#   APEX_VERIFY_RUNTIME     host | enroot | apptainer (default: enroot when an image is set, else host;
#                           a pod's initContainer is host: it runs inside the image)
#   APEX_VERIFY_IMAGE       the image: docker://REGISTRY#REPO@sha256:... or a .sqsh (enroot), a .sif or
#                           docker://... (apptainer). Default: $SPANK_PYXIS_CONTAINER_IMAGE, the job's
#                           --container-image where the site's Slurm exports SPANK options to the Prolog
#   APEX_VERIFY_PYTHON      the interpreter (default python3)
#   APEX_VERIFY_ARGS        verify's flags (default --require-gpu: a node without a usable GPU is exit 3)
#   APEX_VERIFY_REPORT_DIR  where the .json/.md reports go (default /var/log/apex-verify)
#   APEX_VERIFY_REPORT_NAME their name without the suffix (default <job>-<host>)
set -uo pipefail

DEFAULT_PYZ=/opt/apex-toolchain/verify.pyz
PYZ=${APEX_VERIFY_PYZ:-$DEFAULT_PYZ}
IMAGE=${APEX_VERIFY_IMAGE:-${SPANK_PYXIS_CONTAINER_IMAGE:-}}
RUNTIME=${APEX_VERIFY_RUNTIME:-}
PYTHON=${APEX_VERIFY_PYTHON:-python3}
REPORT_DIR=${APEX_VERIFY_REPORT_DIR:-/var/log/apex-verify}
read -r -a VERIFY_ARGS <<< "${APEX_VERIFY_ARGS:---require-gpu}"
JOB=${SLURM_JOB_ID:-nojob}
HOST=$(hostname -s 2>/dev/null || hostname 2>/dev/null || echo "${HOSTNAME:-unknown}")
NAME=${APEX_VERIFY_REPORT_NAME:-${JOB}-${HOST}}
if [ -n "${SLURM_JOB_ID:-}" ]; then WHO="prolog (job ${JOB} on ${HOST})"; else WHO="hook (on ${HOST})"; fi

say() { echo "apex-verify ${WHO}: $*" >&2; }
misconfigured() { say "$*"; exit 2; }  # every setting is checked before anything runs

# --- signals: one line and exit 1, verify stopped first ---------------------------------------------------
child=""        # the running verify (or the container runtime that runs it), started by run_verify
reports_ours=""  # set once the report paths are this run's: a stopped run removes them
started=""       # set once verify was started
# shellcheck disable=SC2329  # called by the traps below
stopped() {
  trap '' INT TERM HUP  # a second signal changes nothing
  if [ -n "$started" ] && [ -z "${code:-}" ]; then  # verify runs (or a signal came before `child=$!`)
    local pid=${child:-$!}
    # SIGTERM, not the signal received: a background job of this non-interactive shell ignores SIGINT
    kill -TERM "$pid" 2>/dev/null
    for ((tick = 0; tick < 100; tick++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  fi
  [ -z "$reports_ours" ] || rm -f -- "$REPORT_DIR/$NAME.json" "$REPORT_DIR/$NAME.md"
  if [ -n "$started" ]; then
    say "interrupted by SIG$1; verify stopped, no report kept (exit 1)"
  else
    say "interrupted by SIG$1 before verify started; nothing written (exit 1)"
  fi
  exit 1
}
trap 'stopped INT' INT
trap 'stopped TERM' TERM
trap 'stopped HUP' HUP
run_verify() {  # "$@" in the background, so that a signal reaches the trap at once; sets code
  started=1
  "$@" &
  child=$!
  wait "$child"
  code=$?
}

# --- the settings, each checked before anything runs: a misconfigured hook is exit 2, never 1 or 3 -------
if [ -z "$RUNTIME" ]; then
  if [ -n "$IMAGE" ]; then RUNTIME=enroot; else RUNTIME=host; fi
fi
case "$RUNTIME" in
  host|enroot|apptainer) ;;
  *) misconfigured "APEX_VERIFY_RUNTIME=$RUNTIME: unknown; use host, enroot or apptainer" ;;
esac
BUILD_IT="build it with 'python build.py zipapp --out ${PYZ}'"
[ -n "${APEX_VERIFY_PYZ:-}" ] || BUILD_IT="APEX_VERIFY_PYZ is unset or empty, so the default; set it, or $BUILD_IT"
[ -d "$PYZ" ] && misconfigured "APEX_VERIFY_PYZ=$PYZ is a directory, not the zipapp; point it at the file itself ($BUILD_IT)"
if [ ! -e "$PYZ" ]; then
  misconfigured "APEX_VERIFY_PYZ=$PYZ does not exist; $BUILD_IT"
fi
if [ ! -f "$PYZ" ]; then  # a FIFO or a device would hang or never end the checks below
  misconfigured "APEX_VERIFY_PYZ=$PYZ is not a regular file (a FIFO, a device or a socket); $BUILD_IT"
fi
if [ ! -r "$PYZ" ] || ! head -c 1 "$PYZ" >/dev/null 2>&1; then
  misconfigured "APEX_VERIFY_PYZ=$PYZ is not readable by this user ($(id -un 2>/dev/null || id -u)); make it readable (chmod a+r)"
fi
{ LC_ALL=C grep -q -a "__main__.py" "$PYZ" && LC_ALL=C grep -q -a "verify/cli.py" "$PYZ"; } \
  || misconfigured "APEX_VERIFY_PYZ=$PYZ is not the verify zipapp (no __main__.py and verify/cli.py inside); $BUILD_IT"
prefix_of() { case "$2" in "$1"*) return 0 ;; esac; return 1; }  # is $1 a prefix of $2
for flag in "${VERIFY_ARGS[@]}"; do
  option=${flag%%=*}  # argparse takes any unambiguous prefix: --js is --json, --mark is --markdown
  if { [ ${#option} -ge 3 ] && prefix_of "$option" --json; } || { [ ${#option} -ge 5 ] && prefix_of "$option" --markdown; }; then
    misconfigured "APEX_VERIFY_ARGS has $flag: the hook writes the reports itself (APEX_VERIFY_REPORT_DIR); drop it"
  fi
done
if [ "$RUNTIME" = host ] && ! command -v "$PYTHON" >/dev/null 2>&1; then
  misconfigured "APEX_VERIFY_PYTHON=$PYTHON is not a command on this node; set it to the Python that has torch"
fi
case "$NAME" in
  */*|.*|-*|*[!A-Za-z0-9._+@-]*)
    misconfigured "APEX_VERIFY_REPORT_NAME=$NAME is not a plain file name (letters, digits, . _ + @ -, not starting with . or -); set one such as verify" ;;
esac
if ! mkdir -p -- "$REPORT_DIR" 2>/dev/null || [ ! -d "$REPORT_DIR" ]; then
  misconfigured "APEX_VERIFY_REPORT_DIR=$REPORT_DIR is not a writable directory (mkdir -p failed: something on the path is not a folder, or it may not be made); point it at one"
fi
REPORT_DIR=$(cd -- "$REPORT_DIR" && pwd) || misconfigured "APEX_VERIFY_REPORT_DIR cannot be entered; make it searchable (chmod a+x)"
probe=$(mktemp "$REPORT_DIR/.apex-verify-probe.XXXXXX" 2>&1) \
  || misconfigured "APEX_VERIFY_REPORT_DIR=$REPORT_DIR is not a writable directory (${probe##*: }); point it at one"
rm -f -- "$probe"
for report in "$REPORT_DIR/$NAME.json" "$REPORT_DIR/$NAME.md"; do
  rm -f -- "$report" 2>/dev/null  # what is there afterwards, this run wrote
  [ -e "$report" ] && misconfigured "APEX_VERIFY_REPORT_DIR=$REPORT_DIR holds $report, which is not a file that can be replaced; remove it"
done
reports_ours=1
PYZ_DIR=$(cd -- "$(dirname -- "$PYZ")" && pwd)
PYZ_NAME=$(basename -- "$PYZ")
PYZ="$PYZ_DIR/$PYZ_NAME"  # absolute: verify's argument parser never sees a path that starts with '-'

need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  say "APEX_VERIFY_RUNTIME=$RUNTIME needs '$1', which is not on PATH on this node"
  exit 3
}

case "$RUNTIME" in
  host)
    run_verify "$PYTHON" "$PYZ" "${VERIFY_ARGS[@]}" --json "$REPORT_DIR/$NAME.json" --markdown "$REPORT_DIR/$NAME.md"
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
    run_verify enroot start --mount "$PYZ_DIR:/opt/apex-verify" --mount "$REPORT_DIR:/opt/apex-verify-report" "$container" \
      "$PYTHON" "/opt/apex-verify/$PYZ_NAME" "${VERIFY_ARGS[@]}" \
      --json "/opt/apex-verify-report/$NAME.json" --markdown "/opt/apex-verify-report/$NAME.md"
    ;;
  apptainer)
    [ -n "$IMAGE" ] || { say "APEX_VERIFY_RUNTIME=apptainer needs APEX_VERIFY_IMAGE (a .sif or docker://...)"; exit 2; }
    need apptainer
    case "$IMAGE" in
      *://*) ;;
      *) [ -f "$IMAGE" ] && [ -r "$IMAGE" ] || misconfigured "APEX_VERIFY_IMAGE=$IMAGE is not a readable image file (.sif)" ;;
    esac
    run_verify apptainer exec --nv --bind "$PYZ_DIR:/opt/apex-verify,$REPORT_DIR:/opt/apex-verify-report" "$IMAGE" \
      "$PYTHON" "/opt/apex-verify/$PYZ_NAME" "${VERIFY_ARGS[@]}" \
      --json "/opt/apex-verify-report/$NAME.json" --markdown "/opt/apex-verify-report/$NAME.md"
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
  2) say "verify refused its input (exit 2): its line above names the flag; check APEX_VERIFY_ARGS" ;;
  3) say "this node cannot run the image (exit 3: no usable GPU or driver too old; report $REPORT_DIR/$NAME.json)" ;;
  *) say "verify did not run to the end (exit $code); treating it as exit 3"; code=3 ;;
esac
exit "$code"
