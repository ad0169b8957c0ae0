#!/usr/bin/env bash
# versions.sh   (make contract-version)
#
# The contract is a product with versions (openapi/releases/README.md):
#   * a contract that differs from the latest release in openapi/releases/
#     carries a greater info.version, with a section in CHANGELOG.md;
#   * oasdiff (pinned, `go run`) finds no breaking change (ERR) against the
#     latest release unless the major version grew, or
#     openapi/releases/<version>-accepted-breaks.txt lists it.
# oasdiff-levels.txt holds the project's own severities (oasdiff's format: no
# comments), each a promise the contract's description makes: answers' enums
# may gain values in a minor version (response-property-enum-value-added is a
# warning, not a break), because clients are told to accept unknown values.
# Last line:  contract-version: OK|FAILED - ...
# Exit 0 OK, 1 failure.
set -uo pipefail
OASDIFF_VERSION=v1.36.0
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 1
GO="${GO:-go}"
REL=openapi/releases
version_of() { sed -n 's/^  version: *\([0-9][0-9.]*\).*/\1/p' "$1" | head -n 1; }
newer() { [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n 1)" = "$1" ]; }

latest="$(ls "$REL"/*.yaml 2>/dev/null | sed 's#.*/##; s#\.yaml$##' | sort -V | tail -n 1)"
[ -n "$latest" ] || { echo "contract-version: FAILED - no release in $REL"; exit 1; }
current="$(version_of openapi/openapi.yaml)"
echo "latest release $latest; openapi/openapi.yaml is $current"
[ "$(version_of "$REL/$latest.yaml")" = "$latest" ] || { echo "contract-version: FAILED - $REL/$latest.yaml does not say version $latest"; exit 1; }

if [ "$current" = "$latest" ]; then
  if cmp -s openapi/openapi.yaml "$REL/$latest.yaml"; then
    echo "contract-version: OK - $current is the latest release, unchanged"; exit 0
  fi
  echo "contract-version: FAILED - the contract changed since release $latest but info.version is still $current: raise it (semver) and say what changed in CHANGELOG.md"
  exit 1
fi
if ! newer "$current" "$latest"; then
  echo "contract-version: FAILED - info.version $current is not greater than the latest release $latest"; exit 1
fi
grep -q "^## $current\b" CHANGELOG.md || { echo "contract-version: FAILED - CHANGELOG.md has no section \"## $current\""; exit 1; }

echo
echo "=== oasdiff $OASDIFF_VERSION breaking $REL/$latest.yaml openapi/openapi.yaml ==="
args=(breaking "$REL/$latest.yaml" openapi/openapi.yaml --fail-on ERR --format text
  --severity-levels .ci/contract/oasdiff-levels.txt)
accepted="$REL/$current-accepted-breaks.txt"
[ -f "$accepted" ] && args+=(--err-ignore "$accepted") && echo "(accepting the breaks listed in $accepted)"
"$GO" run "github.com/oasdiff/oasdiff@$OASDIFF_VERSION" "${args[@]}"
rc=$?
major() { echo "${1%%.*}"; }
if [ $rc -ne 0 ]; then
  if [ "$(major "$current")" -gt "$(major "$latest")" ]; then
    echo "contract-version: OK - $current announces breaking changes against $latest (a new major version)"; exit 0
  fi
  echo "contract-version: FAILED - a breaking change against $latest that $current (same major version) does not announce: undo it, raise the major version, or, for a deliberate fix, list it in $accepted and CHANGELOG.md"
  exit 1
fi
echo "contract-version: OK - $current against release $latest: no unannounced breaking change"
