#!/usr/bin/env bash
# Installs the Debian packages Parley needs that are missing, with apt-get. Sourced by
# scripts/test.sh (everything) and scripts/debate.sh (build only).
#
#   apt_deps build   # cmake + libclang: llama.cpp, the local model's engine, builds from source
#   apt_deps test    # build + redis-server, chromium, chromium-driver (nats-server: a
#                    # pinned release, scripts/nats-server.sh)
apt_deps() {
    local need=()
    command -v cmake >/dev/null 2>&1 || need+=(cmake)
    ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || need+=(libclang-dev)
    if [[ "$1" == test ]]; then
        command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
        command -v chromium >/dev/null 2>&1 || need+=(chromium)
        command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
    fi
    ((${#need[@]})) || return 0
    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        if ! command -v sudo >/dev/null 2>&1; then
            echo "error: Parley needs these Debian packages: ${need[*]} (apt-get install ${need[*]})" >&2
            return 4
        fi
        sudo=(sudo)
    fi
    echo "==> installing ${need[*]} (apt-get)" >&2
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq "${need[@]}" >/dev/null
}
