#!/usr/bin/env bash
# ensure-redis.sh — makes sure Debian's redis-server is installed (tests start their own
# instances on free loopback ports; nothing here starts a server). Prints its path.
set -euo pipefail
if ! command -v redis-server >/dev/null 2>&1; then
  echo "ensure-redis: installing redis-server from Debian" >&2
  sudo_=""; [[ $(id -u) -eq 0 ]] || sudo_=sudo
  $sudo_ apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq redis-server >&2
fi
command -v redis-server
