#!/usr/bin/env bash
# Installs promtool (Prometheus' rule checker and rule unit-test runner) into the tools cache
# and prints its path as the last line.
#
#   scripts/get-promtool.sh        # -> $TRAINJOBS_CACHE/tools/promtool-<debian version>/promtool
#
# Why from Debian's package: our machines reach Debian's mirror; the `prometheus` package holds
# a static promtool, so `apt-get download` + `dpkg -x` give it without installing (or starting)
# a Prometheus server and without root. A second run finds it and only prints its path.
set -euo pipefail

CACHE="${TRAINJOBS_CACHE:-$HOME/.cache/trainjobs}"
found=$(ls -d "$CACHE"/tools/promtool-*/promtool 2>/dev/null | sort | tail -n 1 || true)
if [ -n "$found" ] && [ -x "$found" ]; then
  echo "$found"
  exit 0
fi

command -v apt-get >/dev/null || { echo "error: promtool comes from Debian's prometheus package; apt-get is required" >&2; exit 1; }
mkdir -p "$CACHE/tools"
exec 9>"$CACHE/tools/.promtool.lock"
flock 9
tmp="$(mktemp -d "$CACHE/tools/promtool.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download prometheus >&2) || {
  echo "error: 'apt-get download prometheus' failed (run 'apt-get update' first?)" >&2; exit 1; }
deb=$(ls "$tmp"/prometheus_*.deb)
version=$(dpkg-deb -f "$deb" Version)
dpkg -x "$deb" "$tmp/root"
dest="$CACHE/tools/promtool-$version"
mkdir -p "$dest"
cp "$tmp/root/usr/bin/promtool" "$dest/promtool"
"$dest/promtool" --version >&2
echo "$dest/promtool"
