#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine, starts the Docker
# engine when none answers, then runs ruff, mypy, the whole pytest suite and the lab smoke (a
# microVM booted in the emulated KVM lab, scripts/kvm-lab.sh --smoke).
# Usage: scripts/test.sh [pytest arguments...]
#   With pytest arguments, only pytest runs, with them (no lab smoke).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need_packages=()
command -v dockerd >/dev/null || need_packages+=(docker.io)
command -v debootstrap >/dev/null || need_packages+=(debootstrap)
command -v tmux >/dev/null || need_packages+=(tmux)
command -v git >/dev/null || need_packages+=(git)
if [ ${#need_packages[@]} -gt 0 ]; then
  echo "== Installing ${need_packages[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need_packages[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  echo "== Starting the Docker engine"
  as_root sh -c 'nohup dockerd >/var/log/dockerd.log 2>&1 &'
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "the Docker engine did not start; see /var/log/dockerd.log" >&2; exit 1; }
fi

echo "== Base OS image"
bash scripts/make-debian-base.sh debian:trixie-slim

echo "== Python environment"
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -m pip install -q -e '.[test]' 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -c 'import opencode_sandbox, pytest, hypothesis' || { echo "the Python environment is incomplete" >&2; exit 1; }

echo "== ruff"
.venv/bin/ruff check src tests bench
echo "== mypy"
.venv/bin/mypy

echo "== pytest"
set +e
if [ $# -eq 0 ]; then
  .venv/bin/python -m pytest --durations=40
else
  .venv/bin/python -m pytest "$@"
fi
status=$?
set -e
if [ "$status" = 5 ]; then
  echo "pytest collected no tests" >&2
  exit 1
fi
[ $# -eq 0 ] || exit "$status"

echo "== lab smoke (a microVM booted under QEMU's emulated AMD CPU)"
set +e
as_root bash scripts/kvm-lab.sh --smoke
lab_status=$?
set -e
echo "== pytest exited with $status, the lab smoke with $lab_status"
[ "$status" = 0 ] && [ "$lab_status" = 0 ]
