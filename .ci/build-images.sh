#!/usr/bin/env bash
# Build the Docker image the sandbox tests run in, from Debian's packages only
# (no container registry is reachable here), and install the host packages the
# local sandbox tests need. Idempotent: an image that already exists is kept.
#
#   bash .ci/build-images.sh            # build reproagent-test:bookworm if missing
#   REBUILD=1 bash .ci/build-images.sh  # rebuild it anyway
#
# Env: REPROAGENT_DEBIAN_MIRROR overrides the mirror (default: the first Debian
# mirror found in /etc/apt/sources.list*).
set -euo pipefail

IMAGE="${REPROAGENT_TEST_IMAGE:-reproagent-test:bookworm}"
SUITE=bookworm
PACKAGES=python3,python3-pytest,nodejs,default-jdk-headless,junit4,junit5

log() { echo "build-images: $*" >&2; }

find_mirror() {
    if [ -n "${REPROAGENT_DEBIAN_MIRROR:-}" ]; then echo "$REPROAGENT_DEBIAN_MIRROR"; return; fi
    local m
    # deb822 sources: a "URIs:" line; one-line sources: "deb URL SUITE ...". Skip security.
    m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | awk '/^URIs:/ {print $2}' | grep -v -- '-security' | grep '/debian/*$' | head -n1 || true)
    if [ -z "$m" ]; then
        m=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
            | awk '$1=="deb" {for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; break}}' \
            | grep -v -- '-security' | grep '/debian/*$' | head -n1 || true)
    fi
    if [ -z "$m" ]; then log "no Debian mirror in /etc/apt/sources.list*; set REPROAGENT_DEBIAN_MIRROR"; exit 1; fi
    echo "$m"
}

need_apt_update=1
apt_install() {
    local missing=()
    for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ $need_apt_update -eq 1 ]; then apt-get update -qq; need_apt_update=0; fi
    log "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Host side, for the local sandbox tests: Debian's python3 with pytest, venv and pip (the
# environment tests build virtualenvs; the Django runner test downloads the sdist), JUnit 4 and 5
# (node and a JDK are on the machine already; installed here too in case they are not).
apt_install python3 python3-pytest python3-venv python3-pip python3-setuptools python3-wheel junit4 junit5 debootstrap
command -v node >/dev/null || apt_install nodejs
command -v javac >/dev/null || apt_install default-jdk-headless

if ! docker info >/dev/null 2>&1; then log "the Docker engine does not answer"; exit 1; fi

if [ -z "${REBUILD:-}" ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "$IMAGE exists; nothing to build (REBUILD=1 to force)"
    exit 0
fi

MIRROR=$(find_mirror)
ROOT=$(mktemp -d /var/tmp/reproagent-rootfs.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
start=$(date +%s)
log "debootstrap $SUITE from $MIRROR into $ROOT ($PACKAGES)"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOT" "$MIRROR" > "$ROOT.log" 2>&1 \
    || { tail -n 30 "$ROOT.log" >&2; log "debootstrap failed (full log: $ROOT.log)"; exit 1; }
rm -f "$ROOT.log"
# Keep the image small and free of the build host's traces.
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT"/tmp/* "$ROOT"/proc/* "$ROOT"/sys/* "$ROOT"/dev/* 2>/dev/null || true
log "docker import $IMAGE"
tar -C "$ROOT" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'WORKDIR /' \
    --change 'CMD ["/bin/bash"]' \
    --message "reproagent test image: debootstrap $SUITE + $PACKAGES" \
    - "$IMAGE" >/dev/null
log "built $IMAGE in $(( $(date +%s) - start ))s"
