#!/usr/bin/env bash
# The build lives inside the package (trainjobs/testing/) so that plugin authors who install
# trainjobs from a wheel can build Kueue too; this is the repository's entry.
exec "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/trainjobs/testing/build-kueue.sh" "$@"
