#!/bin/bash
# The apex-src stage: Apex source into /src/apex, from upstream git at a pinned ref or, offline,
# from a directory in the build context (docker/build-inputs/$APEX_SRC_DIR). Writes
# /src/apex-source.txt ("git+URL@SHA" or "dir:NAME") for the build manifest.
set -euo pipefail
# verify/domain/commit.py's is_commit_sha and apex_tree.py's check_apex_tree, in bash (tests/unit/test_values.py feeds both the
# same cases); the class is spelled out so no locale's collation widens it
is_commit_sha() { [[ $1 =~ ^[0123456789abcdef]{7,40}$ ]]; }
is_apex_tree() { [ -d "$1" ] && [ -f "$1/setup.py" ] && [ -f "$1/apex/__init__.py" ]; }
inputs=/run/apex-toolchain/docker/build-inputs
mkdir -p /src
if [ -n "${APEX_SRC_DIR:-}" ]; then
  src="$inputs/$APEX_SRC_DIR"
  if ! is_apex_tree "$src"; then
    echo "apex-src stage: APEX_SRC_DIR=$APEX_SRC_DIR is not an Apex source tree (no setup.py + apex/__init__.py) in" \
      "docker/build-inputs of the build context; pass an NVIDIA/apex checkout (build.py --apex-src DIR)" >&2
    exit 1
  fi
  cp -a "$src" /src/apex
  echo "dir:$APEX_SRC_DIR" >/src/apex-source.txt
else
  : "${APEX_REPO:?}" "${APEX_REF:?}"
  # build.py validates both; a build driven another way must not hand git an option (--upload-pack=...)
  if [[ $APEX_REPO == -* || $APEX_REF == -* ]]; then
    echo "apex-src stage: APEX_REPO and APEX_REF must not start with '-'; pass a git URL and a commit, tag or branch" >&2
    exit 1
  fi
  git init -q /src/apex
  git -C /src/apex remote add -- origin "$APEX_REPO"
  # a shallow fetch of exactly the ref (full SHA, tag or branch); a short SHA needs the full history
  if git -C /src/apex fetch -q --depth 1 -- origin "$APEX_REF" 2>/dev/null; then
    git -C /src/apex checkout -q --detach FETCH_HEAD
  else
    if ! out=$(git -C /src/apex fetch -q --tags -- origin '+refs/heads/*:refs/remotes/origin/*' 2>&1); then
      echo "$out" >&2
      # the engine reads this line as "environment unavailable" (exit 3), not a broken cell
      echo "apex-src stage: cannot reach $APEX_REPO (git fetch failed: the git host is unreachable from the build);" \
        "pass a local Apex checkout instead: build.py image --apex-src DIR" >&2
      exit 1
    fi
    git -C /src/apex checkout -q --detach "$APEX_REF" -- 2>/dev/null || {
      echo "apex-src stage: APEX_REF=$APEX_REF does not exist in $APEX_REPO; use a commit, tag or branch of it" >&2
      exit 1
    }
  fi
  commit=$(git -C /src/apex rev-parse HEAD)
  case "$commit" in
    "$APEX_REF"*) ;;
    *) if is_commit_sha "$APEX_REF"; then
         echo "apex-src stage: asked for commit $APEX_REF but got $commit" >&2
         exit 1
       fi ;;
  esac
  # contrib extensions need the submodules (cutlass, cudnn-frontend); the core build does not
  if [[ " ${APEX_FLAGS:-} " =~ APEX_(ALL_CONTRIB_EXT|FAST_BOTTLENECK|FUSED_CONV_BIAS_RELU|CUDNN_GBN|FAST_MULTIHEAD_ATTN|FMHA)=1 ]]; then
    git -C /src/apex submodule update -q --init --recursive --depth 1
  fi
  echo "git+$APEX_REPO@$commit" >/src/apex-source.txt
fi
echo "apex-src stage: $(cat /src/apex-source.txt)"
