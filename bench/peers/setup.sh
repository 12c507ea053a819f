#!/usr/bin/env bash
# Create bench/peers/.venv with the peer job queues the drain benchmark compares against.
# They are never dependencies of leasectl: they live in their own virtual environment and the
# benchmark drives them as subprocesses (bench/peers/*.py).
#
# Usage: bash bench/peers/setup.sh [PYTHON]     (idempotent; rerun to upgrade)
# Each peer is installed on its own, so one that cannot be installed here is recorded in
# bench/peers/.venv/SKIPPED (name and reason) and skipped by the benchmark, not fatal.
set -uo pipefail
cd "$(dirname "$0")"
PYTHON=${1:-${PYTHON:-python3}}
VENV=.venv
PEERS=(pgqueuer procrastinate chancy)

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV" || { echo "cannot create $VENV with $PYTHON" >&2; exit 1; }
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
# psycopg (with its binary build and pool) is what every peer driver uses for bookkeeping.
"$VENV/bin/python" -m pip install --quiet "psycopg[binary,pool]>=3.2" asyncpg \
    || { echo "cannot install psycopg into $VENV" >&2; exit 1; }

: > "$VENV/SKIPPED"
for peer in "${PEERS[@]}"; do
    # Check that the registry has it before trying to install it (and say so when it has not).
    tmp=$(mktemp -d)
    if ! "$VENV/bin/python" -m pip download --quiet --no-deps -d "$tmp" "$peer" >"$tmp/log" 2>&1; then
        echo "$peer	not downloadable: $(tail -1 "$tmp/log")" >> "$VENV/SKIPPED"
        echo "skip $peer: not downloadable" >&2
        rm -rf "$tmp"; continue
    fi
    rm -rf "$tmp"
    if "$VENV/bin/python" -m pip install --quiet "$peer" >"$VENV/install-$peer.log" 2>&1; then
        echo "installed $peer $("$VENV/bin/python" -m pip show "$peer" | sed -n 's/^Version: //p')"
    else
        echo "$peer	install failed: $(tail -1 "$VENV/install-$peer.log")" >> "$VENV/SKIPPED"
        echo "skip $peer: install failed (see $VENV/install-$peer.log)" >&2
    fi
done
