#!/usr/bin/env bash
# The Docker engine for the container test, started and stopped by us only when we started it:
#
#   scripts/docker-daemon.sh [start]   # return at once when `docker info` works (an engine found running is
#                                      # used and never touched); otherwise start `dockerd` (Debian package
#                                      # docker.io) in the background, record its pid in $PIDFILE, and wait
#                                      # up to ${DOCKERD_WAIT_S:-60} s for it
#   scripts/docker-daemon.sh stop      # stop the dockerd recorded in $PIDFILE (and with it the containerd it
#                                      # runs); an engine this script did not start is left running
#
# PIDFILE: ${RADSCREEN_DOCKERD_PIDFILE:-/run/radscreen-dockerd.pid}. scripts/test.sh calls `stop` when the
# test run ends, so `make test` leaves no daemon behind; the images it built stay on disk
# (scripts/docker-leftovers.sh lists them, `make clean-docker` removes them).
# start: exit 0 engine ready, exit 1 no engine, with the reason on stderr (the container test skips on it).
set -uo pipefail

PIDFILE=${RADSCREEN_DOCKERD_PIDFILE:-/run/radscreen-dockerd.pid}
log() { echo "docker-daemon: $*" >&2; }

# The pid recorded in $PIDFILE when that process is still a running dockerd; nothing otherwise.
recorded_pid() {
    local pid
    pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] && echo "$pid"
}

stop() {
    local pid
    if ! pid=$(recorded_pid); then
        rm -f "$PIDFILE"
        log "no dockerd started by this script is running; nothing to stop"
        return 0
    fi
    log "stopping the dockerd this script started (pid $pid)"
    kill -TERM "$pid" 2>/dev/null
    # dockerd stops its own containerd and containers on SIGTERM; give it ${DOCKERD_STOP_S:-30} s
    for _ in $(seq 1 "$((${DOCKERD_STOP_S:-30} * 2))"); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "dockerd (pid $pid) did not stop within ${DOCKERD_STOP_S:-30} s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null
    fi
    rm -f "$PIDFILE"
    log "dockerd stopped"
}

start() {
    if ! command -v docker >/dev/null 2>&1; then
        log "no docker client on PATH (Debian package docker.io; scripts/install-system-deps.sh)"
        return 1
    fi
    if docker info >/dev/null 2>&1; then
        return 0
    fi
    if ! command -v dockerd >/dev/null 2>&1; then
        log "no running Docker engine and no dockerd to start (Debian package docker.io)"
        return 1
    fi
    if [ "$(id -u)" -ne 0 ]; then
        log "no running Docker engine, and dockerd needs root (this is uid $(id -u))"
        return 1
    fi
    local logfile pid
    logfile=${DOCKERD_LOG:-/var/log/radscreen-dockerd.log}
    log "starting dockerd (log: $logfile; \`bash scripts/docker-daemon.sh stop\` stops it)"
    # setsid + nohup: the daemon outlives this script and the test session that called it, until `stop`.
    setsid nohup dockerd >"$logfile" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$PIDFILE"
    for _ in $(seq 1 "$((${DOCKERD_WAIT_S:-60} * 2))"); do
        if docker info >/dev/null 2>&1; then
            log "dockerd ready (pid $pid)"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            log "dockerd exited during start-up; last log lines:"
            tail -n 15 "$logfile" >&2
            rm -f "$PIDFILE"
            return 1
        fi
        sleep 0.5
    done
    log "dockerd did not answer within ${DOCKERD_WAIT_S:-60} s; last log lines:"
    tail -n 15 "$logfile" >&2
    stop
    return 1
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 [start|stop]  (got '$1')" >&2; exit 2 ;;
esac
