#!/usr/bin/env bash
# Fetch the index benchmark's corpora into benches/data/ (gitignored). Idempotent: a corpus
# already unpacked is left alone; re-running only does what is missing.
#
#   benches/data/django      Django 4.2.16 sdist, from PyPI (pip download)
#   benches/data/typescript  the TypeScript compiler 4.8 source, Debian package node-typescript
#   benches/data/guava       Guava 31 source, Debian package guava-libraries
#
# Needs: pip, apt-get, and (for the Debian sources) root, to add deb-src entries and to
# install dpkg-dev. Only PyPI and Debian's mirror are used.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
data="$here/data"
mkdir -p "$data"
cd "$data"

log() { printf 'fetch: %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# --- Django from PyPI -------------------------------------------------------------------
DJANGO_VERSION=4.2.16
if [ -d django ]; then
    log "django: present"
else
    log "django: pip download django==$DJANGO_VERSION (sdist)"
    rm -rf .django-stage && mkdir .django-stage
    python3 -m pip download --quiet --no-deps --no-binary :all: "django==$DJANGO_VERSION" -d .django-stage
    sdist="$(ls .django-stage/*.tar.gz | head -n1)"
    tar -xzf "$sdist" -C .django-stage
    top="$(find .django-stage -mindepth 1 -maxdepth 1 -type d | head -n1)"
    mv "$top" django
    rm -rf .django-stage
fi

# --- Debian sources ---------------------------------------------------------------------
have_deb_src() { apt-cache showsrc "$1" 2>/dev/null | grep -q '^Package:'; }

enable_deb_src() {
    # Mirror the Debian entries (deb.debian.org) of the existing source lists as deb-src,
    # in a file of our own, so the machine's lists are not edited.
    local out=/etc/apt/sources.list.d/reproagent-deb-src.sources
    local tmp
    tmp="$(mktemp)"
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -e "$f" ] || continue
        [ "$f" = "$out" ] && continue
        # deb822: keep the stanzas whose URIs are on deb.debian.org, with Types: deb-src.
        awk '
            function flush() {
                if (buf != "" && debian && deb) printf "%s\n", buf;
                buf = ""; debian = 0; deb = 0;
            }
            /^[[:space:]]*$/ { flush(); next }
            /^URIs:/ && /deb\.debian\.org/ { debian = 1 }
            /^Types:/ {
                for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1;
                buf = buf "Types: deb-src\n"; next
            }
            { buf = buf $0 "\n" }
            END { flush() }' "$f" >> "$tmp"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -e "$f" ] || continue
        # one-line format: deb URI suite components -> deb-src URI suite components
        grep -E '^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?[a-z]+://deb\.debian\.org' "$f" \
            | sed -E 's/^[[:space:]]*deb[[:space:]]+/deb-src /' > "$tmp.list" || true
        if [ -s "$tmp.list" ]; then
            as_root cp "$tmp.list" /etc/apt/sources.list.d/reproagent-deb-src.list
        fi
        rm -f "$tmp.list"
    done
    if [ -s "$tmp" ]; then
        as_root cp "$tmp" "$out"
        as_root chmod 644 "$out"
    fi
    rm -f "$tmp"
    log "apt-get update (deb-src enabled)"
    as_root apt-get update -qq
}

fetch_deb_src() { # <source package> <stable dir name>
    local pkg="$1" name="$2"
    if [ -d "$name" ]; then
        log "$name: present"
        return
    fi
    if ! have_deb_src "$pkg"; then
        enable_deb_src
    fi
    if ! command -v dpkg-source >/dev/null; then
        log "installing dpkg-dev (for dpkg-source)"
        as_root apt-get install -y -qq dpkg-dev
    fi
    log "$name: apt-get source $pkg"
    rm -rf ".$name-stage" && mkdir ".$name-stage"
    (cd ".$name-stage" && apt-get source -qq "$pkg")
    local top
    top="$(find ".$name-stage" -mindepth 1 -maxdepth 1 -type d | head -n1)"
    mv "$top" "$name"
    rm -rf ".$name-stage"
}

fetch_deb_src node-typescript typescript
fetch_deb_src guava-libraries guava

log "done: $(cd "$data" && ls -d django typescript guava 2>/dev/null | tr '\n' ' ')"
