#!/usr/bin/env bash
# The build lives inside the package (trainjobs/testing/) so that plugin authors who install
# trainjobs from a wheel can build the gang schedulers too; this is the repository's entry.
exec "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/trainjobs/testing/build-gang-schedulers.sh" "$@"
