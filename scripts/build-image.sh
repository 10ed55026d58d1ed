#!/usr/bin/env bash
# build-image.sh — the operator's OCI image without a container engine (`make image`).
# Prints the path of the OCI archive last (dist/trainjobs-operator-VERSION.oci.tar).
#
# What goes in, and why this way:
# - the root filesystem: Debian 12's own python3.11 and the shared libraries it needs, from
#   Debian's packages (`apt-get download` + `dpkg -x`: no root, no maintainer scripts, so no
#   shell, perl, dpkg or apt in the image — the "distroless" recipe). ca-certificates' bundle
#   is assembled as its postinst would.
# - trainjobs' wheel (uv build) and exactly the runtime wheels uv.lock pins (uv export, hash-
#   checked), installed into /usr/lib/python3/dist-packages and byte-compiled.
# - assembled by umoci (Debian's package, dpkg -x as well) into an OCI image layout, then tarred
#   as an OCI archive: `skopeo copy oci-archive:FILE docker://REGISTRY/trainjobs/operator:TAG`.
# The image runs `python3.11 -m trainjobs.cli operator` as UID/GID 65532 with no shell in it;
# the Dockerfile builds the equivalent from python:3.11-slim for those who have Docker.
# Heavy downloads (the .debs, umoci, wheels) are cached under $TRAINJOBS_CACHE.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
cache=${TRAINJOBS_CACHE:-$HOME/.cache/trainjobs}
export UV_CACHE_DIR=${UV_CACHE_DIR:-$cache/uv-cache}
uv=$("$here/uv.sh")
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/pyproject.toml" | head -n 1)
name=${IMAGE_NAME:-trainjobs/operator}
out=${IMAGE_OUT:-$root/dist/trainjobs-operator-$version.oci.tar}
arch=$(dpkg --print-architecture)
t0=$SECONDS

# Debian packages of the root filesystem (the dependency closure of python3.11's stdlib, less
# what only maintainer scripts use: debconf, perl, dpkg, tar, coreutils).
PACKAGES=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libc6 libgcc-s1
  gcc-12-base libssl3 zlib1g libexpat1 libffi8 libbz2-1.0 liblzma5 libsqlite3-0 libncursesw6
  libtinfo6 libreadline8 readline-common libuuid1 libcrypt1 libdb5.3 libgdbm6 libgdbm-compat4
  libnsl2 libtirpc3 libtirpc-common libgssapi-krb5-2 libk5crypto3 libkeyutils1 libkrb5-3
  libkrb5support0 libcom-err2 media-types netbase ca-certificates)

debs="$cache/image/debs-$arch"
tools="$cache/image/tools-$arch"
mkdir -p "$debs" "$tools"
exec 9>"$cache/image/.lock"; flock 9

fetch() {  # fetch DIR PACKAGE...: the candidate .debs, once
  local dir=$1; shift
  local want=()
  for p in "$@"; do
    local v; v=$(apt-cache policy "$p" | sed -n 's/ *Candidate: //p')
    [[ -n $v && $v != "(none)" ]] || { echo "build-image: no Debian package $p (apt-get update?)" >&2; exit 1; }
    ls "$dir/${p}_"*.deb >/dev/null 2>&1 || want+=("$p=$v")
  done
  if ((${#want[@]})); then (cd "$dir" && apt-get download "${want[@]}" >&2 2>/dev/null) ||
    { echo "build-image: apt-get download ${want[*]} failed" >&2; exit 1; }; fi
}

# umoci, from its Debian package
if [[ ! -x $tools/usr/bin/umoci ]]; then
  fetch "$tools" umoci
  dpkg -x "$tools"/umoci_*.deb "$tools"
fi
umoci="$tools/usr/bin/umoci"
# skopeo (and the libraries Debian links it with), to inspect and push the archive.
if [[ ! -x $tools/skopeo ]]; then
  fetch "$tools" skopeo libgpgme11 libassuan0
  for p in skopeo libgpgme11 libassuan0; do dpkg -x "$(ls "$tools/${p}_"*.deb | tail -n 1)" "$tools"; done
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s/usr/lib/%s" exec "%s/usr/bin/skopeo" "$@"\n' \
    "$tools" "$(uname -m)-linux-gnu" "$tools" > "$tools/skopeo"
  chmod +x "$tools/skopeo"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/trainjobs-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
mkdir -p "$rootfs"

echo "build-image: Debian packages (${#PACKAGES[@]})" >&2
fetch "$debs" "${PACKAGES[@]}"
for p in "${PACKAGES[@]}"; do dpkg -x "$(ls "$debs/${p}_"*.deb | tail -n 1)" "$rootfs"; done
# What dpkg's maintainer scripts would have made: the CA bundle, python names, /tmp.
mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/tmp" "$rootfs/usr/local/bin"
find "$rootfs/usr/share/ca-certificates" -name '*.crt' | sort | xargs cat \
  > "$rootfs/etc/ssl/certs/ca-certificates.crt"
ln -sf python3.11 "$rootfs/usr/bin/python3"
ln -sf python3.11 "$rootfs/usr/bin/python"  # the chart's `helm test` pod runs `python -c`
chmod 1777 "$rootfs/tmp"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\ntrainjobs:x:65532:65532:trainjobs:/nonexistent:/usr/sbin/nologin\n' > "$rootfs/etc/passwd"
printf 'root:x:0:\ntrainjobs:x:65532:\n' > "$rootfs/etc/group"
rm -rf "$rootfs"/usr/share/{doc,man,info,lintian,locale} "$rootfs"/usr/lib/python3.11/test

echo "build-image: trainjobs wheel and the locked runtime wheels" >&2
"$uv" build --quiet --wheel --out-dir "$work/wheel" "$root" >&2
"$uv" export --quiet --frozen --no-emit-project --no-dev --project "$root" -o "$work/requirements.txt"
site="$rootfs/usr/lib/python3/dist-packages"
"$uv" pip install --quiet --target "$site" --python-version 3.11 \
  --python-platform "$(uname -m)-manylinux_2_36" --only-binary :all: --require-hashes \
  -r "$work/requirements.txt" >&2
"$uv" pip install --quiet --target "$site" --python-version 3.11 \
  --python-platform "$(uname -m)-manylinux_2_36" --no-deps "$work"/wheel/trainjobs-*.whl >&2
rm -rf "$site/bin"  # console scripts with this machine's interpreter in their #!
# Byte-compile with a 3.11 (the image's filesystem is read-only at run time).
py=$(command -v python3.11 || command -v python3)
"$py" -m compileall -q -j 0 --invalidation-mode unchecked-hash "$site" "$rootfs/usr/lib/python3.11" >&2 || true

echo "build-image: OCI layout (umoci)" >&2
layout="$work/oci"
"$umoci" init --layout "$layout"
"$umoci" new --image "$layout:$version"
"$umoci" unpack --rootless --image "$layout:$version" "$work/bundle" >&2
rm -rf "$work/bundle/rootfs" && mv "$rootfs" "$work/bundle/rootfs"
"$umoci" repack --image "$layout:$version" --history.created_by "scripts/build-image.sh" "$work/bundle"
"$umoci" config --image "$layout:$version" --no-history \
  --config.user 65532:65532 --config.workingdir /tmp \
  --config.entrypoint /usr/bin/python3.11 --config.entrypoint -m \
  --config.entrypoint trainjobs.cli --config.cmd operator \
  --config.env PYTHONUNBUFFERED=1 --config.env PYTHONDONTWRITEBYTECODE=1 \
  --config.env HOME=/tmp --config.env PATH=/usr/local/bin:/usr/bin:/bin \
  --config.exposedports 8080/tcp --architecture "$arch" --os linux \
  --config.label "org.opencontainers.image.title=trainjobs operator" \
  --config.label "org.opencontainers.image.version=$version" \
  --config.label "org.opencontainers.image.licenses=Apache-2.0" \
  --config.label "org.opencontainers.image.ref.name=$name:$version"
"$umoci" gc --layout "$layout"
mkdir -p "$(dirname "$out")"
tar -C "$layout" --sort=name --owner=0 --group=0 --numeric-owner -cf "$out.partial" .
mv "$out.partial" "$out"
echo "build-image: $name:$version -> $out ($(du -h "$out" | cut -f1), $((SECONDS - t0)) s)" >&2
echo "$out"
