#!/usr/bin/env bash
# Makes sure a Docker engine answers on this machine: returns at once when `docker info` works, otherwise
# starts `dockerd` (Debian package docker.io, installed by scripts/install-system-deps.sh) in the
# background, detached from the caller, and waits up to ${DOCKERD_WAIT_S:-60} s for it. The daemon is
# left running afterwards (the next run of the container test finds it, and its image cache, warm).
# Exit 0: engine ready. Exit 1: no engine, with the reason on stderr (the container test skips on it).
set -uo pipefail

log() { echo "docker-daemon: $*" >&2; }

if ! command -v docker >/dev/null 2>&1; then
    log "no docker client on PATH (Debian package docker.io; scripts/install-system-deps.sh)"
    exit 1
fi
if docker info >/dev/null 2>&1; then
    exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
    log "no running Docker engine and no dockerd to start (Debian package docker.io)"
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    log "no running Docker engine, and dockerd needs root (this is uid $(id -u))"
    exit 1
fi

LOG=${DOCKERD_LOG:-/var/log/radscreen-dockerd.log}
log "starting dockerd (log: $LOG)"
# setsid + nohup: the daemon must outlive this script and the test session that called it.
setsid nohup dockerd >"$LOG" 2>&1 </dev/null &
pid=$!
for _ in $(seq 1 "$((${DOCKERD_WAIT_S:-60} * 2))"); do
    if docker info >/dev/null 2>&1; then
        log "dockerd ready (pid $pid)"
        exit 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        log "dockerd exited during start-up; last log lines:"
        tail -n 15 "$LOG" >&2
        exit 1
    fi
    sleep 0.5
done
log "dockerd did not answer within ${DOCKERD_WAIT_S:-60} s; last log lines:"
tail -n 15 "$LOG" >&2
exit 1
