#!/usr/bin/env bash
# The upstream Apex source archives the tests read (tests/support.py: APEX_FIXTURES), made in DIR from
# GitHub where ../shared/fixtures is not beside the checkout (CI): apex-<name>.tar.gz, each unpacking to
# apex/ like the archives described in that folder's README. Never written into the repository.
#   bash scripts/apex-fixtures.sh DIR && export APEX_TEST_FIXTURES=DIR
# APEX_ARCHIVE_BASE replaces https://github.com/NVIDIA/apex/archive (a mirror; <base>/<commit>.tar.gz).
set -euo pipefail
dir=${1:?usage: bash scripts/apex-fixtures.sh DIR}
base=${APEX_ARCHIVE_BASE:-https://github.com/NVIDIA/apex/archive}
mkdir -p "$dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# name, commit (the README's table: upstream HEAD of 2026-07-08, tag 25.04)
while read -r name commit; do
  rm -rf "$work/unpacked" && mkdir "$work/unpacked"
  curl -fsSL --retry 3 "$base/$commit.tar.gz" | tar -xz -C "$work/unpacked"
  top=("$work"/unpacked/*)
  if [ "${#top[@]}" -ne 1 ] || [ ! -f "${top[0]}/setup.py" ]; then
    echo "scripts/apex-fixtures.sh: $base/$commit.tar.gz is not one Apex tree with a setup.py" >&2
    exit 1
  fi
  [ "${top[0]}" = "$work/unpacked/apex" ] || mv "${top[0]}" "$work/unpacked/apex"
  tar -czf "$dir/apex-$name.tar.gz.part" -C "$work/unpacked" apex
  mv "$dir/apex-$name.tar.gz.part" "$dir/apex-$name.tar.gz"
  echo "$dir/apex-$name.tar.gz (commit $commit)"
done <<'TABLE'
6424da3b 6424da3b4faa6c8f062da4a48c424fff3f02d42d
25.04 e13873debc4699d39c6861074b9a3b2a02327f92
TABLE
