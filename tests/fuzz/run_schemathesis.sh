#!/usr/bin/env bash
# Fuzz the API against its own OpenAPI schema with schemathesis, once per principal.
#
# A fresh SQLite database in a temporary folder: migrated, the example scenario loaded, one
# user per role (policy-admin, finance, viewer) with an API token, and a tenant key of the
# scenario's first tenant. A production-like server
# (DEBUG off, gunicorn, embedded tasks: no broker, so writes that enqueue work run it in
# process) on 127.0.0.1 and a free port. Then `st run` with every phase and every check, a
# fixed seed, once per principal; any failure fails the script.
#
# What is not fuzzed, and why:
#   - POST /api/auth/token/ (password login): wrong passwords are what the fuzzer sends, and
#     after HEADROOM_LOGIN_FAILURE_LIMIT of them django-axes locks the client address out,
#     so every later login would be a 429 and the run would depend on its order. The
#     lockout and the token throttle have their own tests (tests/controlplane/
#     test_login_lockout.py, test_api_auth.py). DELETE /api/auth/token/ is excluded too: it
#     revokes the very token the run authenticates with.
#   - /api/auth/login/ and /api/auth/logout/ are HTML pages for the browsable API, not in the
#     schema.
#
# Environment: FUZZ_SEED (default 20261202), FUZZ_MAX_EXAMPLES (50), FUZZ_PHASES (all four),
# FUZZ_ONLY (space-separated principals to run; default all), FUZZ_KEEP=1 keeps the temporary
# folder (database, server log, each principal's log and JUnit report) and prints where it is,
# FUZZ_VERBOSE=1 prints every principal's whole log.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PY="${ROOT}/.venv/bin/python"
ST="${ROOT}/.venv/bin/st"
SEED="${FUZZ_SEED:-20261202}"
MAX_EXAMPLES="${FUZZ_MAX_EXAMPLES:-50}"
PHASES="${FUZZ_PHASES:-examples,coverage,fuzzing,stateful}"
SCENARIO="${FUZZ_SCENARIO:-docs/scenarios/support-assistant.yaml}"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/headroom-fuzz.XXXXXX")
SERVER_PID=""
cleanup() {
    if [ -n "${SERVER_PID}" ] && kill -0 "${SERVER_PID}" 2>/dev/null; then
        kill "${SERVER_PID}" && wait "${SERVER_PID}" 2>/dev/null || true
    fi
    if [ "${FUZZ_KEEP:-0}" = "1" ]; then
        echo "fuzz files kept in ${WORK}"
    else
        rm -rf "${WORK}"
    fi
}
trap cleanup EXIT

# The server's settings: production mode without TLS (plain HTTP on loopback).
export HEADROOM_VAR_DIR="${WORK}/var"
export DATABASE_URL="sqlite:///${WORK}/var/fuzz.sqlite3"
export DEBUG=false
export SECRET_KEY="fuzz-only-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export ALLOWED_HOSTS=127.0.0.1
export SECURE_SSL_REDIRECT=false
export STATIC_ROOT="${WORK}/static"
export HEADROOM_BENCHMARK_DEVICE=cpu
export LOG_LEVEL=ERROR
unset CELERY_BROKER_URL CELERY_RESULT_BACKEND
mkdir -p "${HEADROOM_VAR_DIR}"

START=$(date +%s)
echo "== fuzz: database and scenario (${WORK})"
"${PY}" manage.py migrate --noinput --verbosity 0
"${PY}" manage.py load_scenario "${SCENARIO}" >/dev/null
"${PY}" manage.py collectstatic --noinput --verbosity 0
# One user per role, each with an API token: lines "principal token".
"${PY}" manage.py shell --no-imports -c "$(cat tests/fuzz/principals.py)" >"${WORK}/principals"
sed -n 's/^TOKEN //p' "${WORK}/principals" >"${WORK}/tokens"
# A tenant-scoped API key (Authorization: Bearer) for the scenario's first tenant by name.
TENANT=$(sed -n 's/^TENANT //p' "${WORK}/principals")
TENANT_KEY=$("${PY}" manage.py tenant_key create --tenant "${TENANT}" --name fuzz --quiet)

PORT=$("${PY}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
BASE="http://127.0.0.1:${PORT}"
"${ROOT}/.venv/bin/gunicorn" -c python:controlplane.serving controlplane.wsgi:application --bind "127.0.0.1:${PORT}" \
    --workers 3 --timeout 120 --log-level warning >"${WORK}/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 120); do
    curl -sf -o /dev/null "${BASE}/api/" -H 'Accept: application/json' && break
    [ "$(curl -s -o /dev/null -w '%{http_code}' "${BASE}/api/")" = 401 ] && break
    sleep 0.5
done
# The schema as the server serves it, fetched once for every run.
curl -sf "${BASE}/api/schema/?format=json" -o "${WORK}/schema.json"

# One schemathesis process per principal, all at once (each single-threaded: Hypothesis is
# not thread-safe on this Python, and the principals' runs share nothing but the server).
run_principal() {
    local principal=$1 header=$2
    PYTHONUNBUFFERED=1 "${ST}" --config-file tests/fuzz/schemathesis.toml --no-color run \
        "${WORK}/schema.json" --url "${BASE}" \
        --phases="${PHASES}" \
        --checks all \
        --seed "${SEED}" \
        --max-examples "${MAX_EXAMPLES}" \
        --workers 1 \
        --request-timeout 60 \
        --exclude-path /api/auth/token/ \
        --report junit --report-dir "${WORK}/reports/${principal}" \
        -H "${header}" >"${WORK}/${principal}.log" 2>&1
}

pids=()
principals=()
start_principal() {
    if [ -n "${FUZZ_ONLY:-}" ] && [[ " ${FUZZ_ONLY} " != *" $1 "* ]]; then
        return 0
    fi
    run_principal "$1" "$2" &
    pids+=($!)
    principals+=("$1")
}
while read -r principal token; do
    start_principal "${principal}" "Authorization: Token ${token}"
done <"${WORK}/tokens"
start_principal tenant-key "Authorization: Bearer ${TENANT_KEY}"

status=0
for i in "${!pids[@]}"; do
    if wait "${pids[$i]}"; then result=passed; else result=FAILED; status=1; fi
    echo "== fuzz: ${principals[$i]} ${result}"
    if [ "${result}" = FAILED ] || [ "${FUZZ_VERBOSE:-0}" = "1" ]; then
        cat "${WORK}/${principals[$i]}.log"
    else
        sed -n '/=== SUMMARY ===/,$p' "${WORK}/${principals[$i]}.log"
    fi
done
# Server errors (tracebacks) are failures too, even where a check did not catch them.
if grep -q -E "ERROR|Traceback" "${WORK}/server.log"; then
    echo "== server errors"
    grep -E -A30 "ERROR|Traceback" "${WORK}/server.log" | head -200
    status=1
fi
echo "== fuzz finished in $(($(date +%s) - START)) s, status ${status}"
exit "${status}"
