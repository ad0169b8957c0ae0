#!/usr/bin/env bash
# lint-spec.sh [SPEC]   (make lint-spec)
#
# Lints the contract (default openapi/openapi.yaml) with two third-party
# linters at the versions pinned in package-lock.json:
#   * Stoplight Spectral, ruleset .spectral.yaml (spectral:oas);
#   * Redocly CLI, config redocly.yaml (recommended).
# Errors and warnings both fail: a warning that is right to keep is silenced
# in the linter's config with a comment saying why.
# Last line:  lint-spec: spectral E errors W warnings; redocly E errors W warnings
# Exit 0 clean, 1 errors or warnings, 2 a tool could not run.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/setup.sh" --npm || exit 2
SPEC="${1:-$ROOT/openapi/openapi.yaml}"
[ -f "$SPEC" ] || { echo "no such spec: $SPEC" >&2; exit 2; }
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
cd "$ROOT" || exit 2

echo "=== Spectral $("$BIN/spectral" --version) (.ci/contract/.spectral.yaml: spectral:oas) ==="
"$BIN/spectral" lint "$SPEC" -r "$CONTRACT_DIR/.spectral.yaml" --fail-severity warn \
  -f stylish -f json --output.stylish "$TMP/spectral.txt" --output.json "$TMP/spectral.json" >"$TMP/spectral.out" 2>&1
sp_rc=$?
cat "$TMP/spectral.txt" "$TMP/spectral.out" 2>/dev/null
# Spectral severities: 0 error, 1 warn, 2 info, 3 hint.
read -r SE SW SI < <(node -e '
  try { const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
        const c = [0, 0, 0, 0]; for (const x of r) c[x.severity]++; console.log(c[0], c[1], c[2]); }
  catch { console.log("? ? ?"); }' "$TMP/spectral.json")
broken=0
if [ "$SE" = "?" ] || [ $sp_rc -gt 1 ]; then
  echo "spectral: FAILED TO RUN (exit $sp_rc)"; broken=1
else
  echo "spectral: $SE errors, $SW warnings, $SI infos"
fi

echo
echo "=== Redocly CLI $("$BIN/redocly" --version 2>/dev/null) (.ci/contract/redocly.yaml: recommended) ==="
"$BIN/redocly" lint "$SPEC" --config "$CONTRACT_DIR/redocly.yaml" --format=stylish --max-problems 1000 >"$TMP/redocly.txt" 2>&1
# Drop the Node end-of-life banner (box-drawing lines).
grep -v -e '║' -e '╔' -e '╚' "$TMP/redocly.txt"
"$BIN/redocly" lint "$SPEC" --config "$CONTRACT_DIR/redocly.yaml" --format=json --max-problems 100000 >"$TMP/redocly.json" 2>/dev/null
read -r RE RW < <(node -e '
  try { const t = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).totals; console.log(t.errors, t.warnings); }
  catch { console.log("? ?"); }' "$TMP/redocly.json")
if [ "$RE" = "?" ]; then
  echo "redocly: FAILED TO RUN"; broken=1
else
  echo "redocly: $RE errors, $RW warnings"
fi

echo
echo "lint-spec: spectral $SE errors $SW warnings; redocly $RE errors $RW warnings"
[ $broken = 1 ] && exit 2
[ "$SE $SW $RE $RW" = "0 0 0 0" ] || exit 1
exit 0
