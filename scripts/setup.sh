#!/usr/bin/env bash
# Installs the system packages stallmon needs when they are missing (Debian/Ubuntu), then checks the toolchain.
#   libunwind-dev  the stack capture in the signal handler
#   libdw-dev      symbol names and file:line from ELF/DWARF (elfutils)
#   zlib1g-dev     gzip request bodies (compress-nio links the system zlib)
# Safe to run repeatedly: it only calls apt-get when a package is absent.
set -euo pipefail

packages=(libunwind-dev libdw-dev zlib1g-dev)
missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done

if ((${#missing[@]} > 0)); then
    echo "setup: installing ${missing[*]}" >&2
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
        sudo="sudo"
    fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

command -v swift >/dev/null || { echo "setup: swift is not on PATH (Swift 6.1 or later is required)" >&2; exit 1; }
