#!/usr/bin/env bash
# The emulated KVM lab: boots a Debian guest under QEMU's software emulator (TCG), whose
# emulated AMD CPU has SVM, so microVMs boot inside it; runs COMMAND there and exits with
# COMMAND's exit code.
#
# Usage: scripts/kvm-lab.sh [--smoke] [--user] [--offline] [COMMAND...]
#   COMMAND      run in the guest as root, in a copy of the checkout's tests. Without COMMAND:
#                the tests that need a booting microVM (`python -m pytest -m kvm`), once as
#                root and once as `tester`, each in a fresh guest
#   --smoke      the lab smoke, as root: the CLI's first `shell`, a write kept across stop
#                and start
#   --user       run COMMAND as the ordinary user `tester` (uid 1001, groups kvm and docker)
#                instead of root
#   --offline    a guest without internet, as on a laptop offline or an air-gapped network: no
#                route out, no DNS resolver, no stand-in internet; only the host's Docker engine
#                answers (QEMU's restricted user network with one forward). Tests see
#                OPENCODE_SANDBOX_LAB_OFFLINE=1
#
# Needs root (it installs Debian packages, runs debootstrap and chroot) and a running Docker
# engine: the guest builds images with the host's engine through a loopback-only forward.
#
# Caches, in OPENCODE_SANDBOX_LAB_CACHE (default /var/cache/opencode-sandbox-lab):
#   base-<key>/      the guest's root file system, kernel and initrd, made by debootstrap;
#                    <key> hashes the package list and build_base below, nothing else; a
#                    base no run has used for a day is removed
#   wheels-<key>/    the project's dependency wheels for the guest's Python; <key> hashes
#                    pyproject.toml
#   run.XXXXXX/      one run's disk image, share (log, exit code) and project wheel, removed
#                    when the run ends
# After a source change only the project's wheel and the test files are refreshed. Runs side by
# side are safe: the guest is refreshed and copied to a run's disk under a lock, and at most
# OPENCODE_SANDBOX_LAB_SLOTS guests boot at once (the others wait for a free slot).
#
# Settings (environment): OPENCODE_SANDBOX_LAB_MEMORY_MIB (6144), OPENCODE_SANDBOX_LAB_TIMEOUT
# (seconds for one boot, 14400), OPENCODE_SANDBOX_LAB_MIRROR (http://deb.debian.org/debian),
# OPENCODE_SANDBOX_LAB_SLOTS (guests booted at once, 2).
set -euo pipefail

CHECKOUT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${OPENCODE_SANDBOX_LAB_CACHE:-/var/cache/opencode-sandbox-lab}
MEMORY_MIB=${OPENCODE_SANDBOX_LAB_MEMORY_MIB:-6144}
BOOT_TIMEOUT=${OPENCODE_SANDBOX_LAB_TIMEOUT:-14400}
MIRROR=${OPENCODE_SANDBOX_LAB_MIRROR:-http://deb.debian.org/debian}
SLOTS=${OPENCODE_SANDBOX_LAB_SLOTS:-2}
OFFLINE_ENGINE_ADDRESS=10.0.2.100
SUITE=trixie
GUEST_PYTHON=3.13
LAB_USER=tester
LAB_UID=1001
HOST_PACKAGES=(qemu-system-x86 qemu-utils debootstrap e2fsprogs socat python3 python3-venv)
GUEST_PACKAGES=(
  python3 python3-venv kmod udev iproute2 ca-certificates linux-image-amd64 initramfs-tools
  procps util-linux e2fsprogs passwd sudo git tmux docker-cli curl dnsmasq-base socat
)
SMOKE_COMMAND=(python -m pytest --instafail -m kvm tests/e2e/test_microsandbox_smoke.py)
DEFAULT_COMMAND=(python -m pytest --instafail -m kvm)

say() { printf '== lab: %s\n' "$*" >&2; }
die() { printf '== lab: %s\n' "$*" >&2; exit 2; }
seconds_since() { echo $(($(date +%s) - $1)); }

as_user=0
offline=0
command_args=()
passes=
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) command_args=("${SMOKE_COMMAND[@]}"); shift ;;
    --user) as_user=1; shift ;;
    --offline) offline=1; shift ;;
    --help|-h) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; command_args=("$@"); break ;;
    *) command_args=("$@"); break ;;
  esac
done
if [ ${#command_args[@]} -eq 0 ]; then
  command_args=("${DEFAULT_COMMAND[@]}")
  [ "$as_user" = 1 ] || passes="0 1"
fi
passes=${passes:-$as_user}
[ "$(id -u)" = 0 ] || die "run me as root: I install packages, run debootstrap and chroot"

missing_host_packages() {
  command -v qemu-system-x86_64 >/dev/null || echo qemu-system-x86
  command -v debootstrap >/dev/null || echo debootstrap
  command -v mkfs.ext4 >/dev/null || echo e2fsprogs
  command -v socat >/dev/null || echo socat
  python3 -c 'import ensurepip, venv' 2>/dev/null || echo python3-venv
}

ensure_host_packages() {
  if [ -n "$(missing_host_packages)" ]; then
    # Two lab runs started together would both run apt, and apt refuses a second one.
    exec 7>/var/lock/opencode-sandbox-lab-install.lock
    flock 7
    if [ -n "$(missing_host_packages)" ]; then
      say "installing ${HOST_PACKAGES[*]}"
      apt-get update -q >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q "${HOST_PACKAGES[@]}" >/dev/null
    fi
    flock -u 7
  fi
  docker info >/dev/null 2>&1 || die "the Docker engine does not answer: start it (scripts/test.sh does)"
}

# Everything that decides the base's content is in this function and GUEST_PACKAGES: their
# text is the cache key.
build_base() {
  local target=$1
  debootstrap --variant=minbase --include="$(IFS=,; echo "${GUEST_PACKAGES[*]}")" \
    "$SUITE" "$target/rootfs" "$MIRROR" >"$target/debootstrap.log" 2>&1 \
    || { tail -20 "$target/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
  chroot "$target/rootfs" /usr/bin/python3 -m venv /opt/lab/venv
  chroot "$target/rootfs" sh -c "
    groupadd -f kvm && groupadd -f docker &&
    useradd --create-home --uid $LAB_UID --groups kvm,docker --shell /bin/bash $LAB_USER &&
    echo lab > /etc/hostname && printf '127.0.0.1 localhost lab\n' > /etc/hosts &&
    printf 'nameserver 10.0.2.3\n' > /etc/resolv.conf"
  cp "$target"/rootfs/boot/vmlinuz-* "$target/vmlinuz"
  cp "$target"/rootfs/boot/initrd.img-* "$target/initrd.img"
}

base_key() {
  { echo "$SUITE ${GUEST_PACKAGES[*]} $LAB_USER $LAB_UID"; declare -f build_base; } | sha256sum | cut -c1-16
}

ensure_base() {
  local key; key=$(base_key)
  BASE="$CACHE/base-$key"
  if [ -f "$BASE/ready" ]; then
    touch "$BASE/ready"
    say "guest base $BASE (cached)"
    return
  fi
  local started; started=$(date +%s)
  say "building the guest base with debootstrap ($SUITE, minbase): a few minutes"
  rm -rf "$BASE.partial"
  mkdir -p "$BASE.partial"
  build_base "$BASE.partial"
  mv "$BASE.partial" "$BASE"
  touch "$BASE/ready"
  # Another base is removed once no run has used it for a day: checkouts of other versions of
  # this script may share the cache, each with its own base.
  for old in "$CACHE"/base-*; do
    if [ "$old" != "$BASE" ] && [ -z "$(find "$old" -maxdepth 1 -name ready -mmin -1440)" ]; then
      say "removing the outdated base $old"
      rm -rf "$old"
    fi
  done
  say "guest base built in $(seconds_since "$started") s"
}

# A host virtual environment that builds the project's wheel and downloads wheels for the
# guest's Python; kept in the cache.
host_pip() {
  local venv="$CACHE/host-venv"
  if [ ! -x "$venv/bin/pip" ]; then
    python3 -m venv "$venv" >/dev/null
  fi
  # The machine's pip settings may name local indexes that do not exist: not worth a warning.
  "$venv/bin/pip" "$@" 2> >(grep -v '^WARNING: Location' >&2)
}

build_project_wheel() {
  local into=$1
  rm -rf "$into"
  mkdir -p "$into"
  host_pip wheel --quiet --no-deps --wheel-dir "$into" "$CHECKOUT" >/dev/null
  ls "$into"/opencode_sandbox-*.whl
}

# Wheels of the dependencies (with the test extra) for the guest's CPython on Linux x86_64.
ensure_dependency_wheels() {
  local key; key=$(sha256sum "$CHECKOUT/pyproject.toml" | cut -c1-16)
  WHEELS="$CACHE/wheels-$key"
  [ -f "$WHEELS/ready" ] && return
  local started; started=$(date +%s)
  say "downloading the dependency wheels for the guest's Python $GUEST_PYTHON"
  rm -rf "$WHEELS"
  mkdir -p "$WHEELS"
  local platforms=()
  for tag in manylinux2014_x86_64 manylinux_2_17_x86_64 manylinux_2_28_x86_64 manylinux_2_34_x86_64 \
             manylinux_2_35_x86_64 manylinux_2_39_x86_64 linux_x86_64; do
    platforms+=(--platform "$tag")
  done
  host_pip download --quiet --dest "$WHEELS" --only-binary=:all: --python-version "$GUEST_PYTHON" \
    --implementation cp "${platforms[@]}" "$PROJECT_WHEEL[test]" >/dev/null
  rm -f "$WHEELS"/opencode_sandbox-*.whl
  for old in "$CACHE"/wheels-*; do
    [ "$old" = "$WHEELS" ] || rm -rf "$old"
  done
  touch "$WHEELS/ready"
  say "dependency wheels downloaded in $(seconds_since "$started") s"
}

in_guest_root() { chroot "$BASE/rootfs" "$@"; }

# The project, its dependencies, the tests and this host's CAs, into the cached base.
refresh_guest() {
  local started; started=$(date +%s)
  local rootfs="$BASE/rootfs"
  local key; key=$(basename "$WHEELS")
  if [ "$(cat "$rootfs/opt/lab/dependencies" 2>/dev/null)" != "$key" ]; then
    say "installing the dependencies into the guest"
    mkdir -p "$rootfs/mnt/wheels"
    mount --bind "$WHEELS" "$rootfs/mnt/wheels"
    WHEELS_MOUNT="$rootfs/mnt/wheels"
    in_guest_root sh -c '/opt/lab/venv/bin/pip install --quiet --no-index --find-links /mnt/wheels /mnt/wheels/*.whl'
    umount "$WHEELS_MOUNT"
    WHEELS_MOUNT=
    echo "$key" > "$rootfs/opt/lab/dependencies"
  fi
  local wheel=$PROJECT_WHEEL
  mkdir -p "$rootfs/opt/lab/project"
  rm -f "$rootfs"/opt/lab/project/*.whl
  cp "$wheel" "$rootfs/opt/lab/project/"
  in_guest_root /opt/lab/venv/bin/pip install --quiet --no-index --no-deps --force-reinstall \
    "/opt/lab/project/$(basename "$wheel")"
  # The tests, docs and settings of the checkout, without its sources: the wheel is what runs.
  rm -rf "$rootfs/opt/lab/src"
  mkdir -p "$rootfs/opt/lab/src"
  (cd "$CHECKOUT" && git ls-files -z --cached --others --exclude-standard -- tests docs bench scripts \
      README.md pyproject.toml | xargs -0 cp --parents -t "$rootfs/opt/lab/src")
  chmod -R a+rX "$rootfs/opt/lab"
  # The host's added CAs: image builds reach the registries as the host does, and the runner
  # image's content hash (which includes them) matches the host's.
  rm -rf "$rootfs/usr/local/share/ca-certificates"
  cp -a /usr/local/share/ca-certificates "$rootfs/usr/local/share/" 2>/dev/null || mkdir -p "$rootfs/usr/local/share/ca-certificates"
  in_guest_root update-ca-certificates --fresh >/dev/null 2>&1
  write_init "$rootfs/lab-init.sh"
  say "guest refreshed with the project's wheel in $(seconds_since "$started") s"
}

write_init() {
  cat > "$1" <<'INIT'
#!/bin/bash
# PID 1 of the lab's guest: mounts, network, kvm_amd, COMMAND, power-off.
export PATH=/opt/lab/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t tmpfs -o mode=755 run /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup
# Every microVM boot logs a harmless "Unhandled WRMSR": keep kernel messages off the console.
dmesg -n 1
# /tmp stays on the disk: loaded images are large, and the disk keeps extended attributes.
chmod 1777 /tmp
hostname lab
modprobe -a 9pnet_virtio 9p virtio_net
mkdir -p /lab/share
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 share /lab/share
ip link set lo up
for _ in $(seq 100); do
  nic=$(ls /sys/class/net | grep -v '^lo$' | head -n 1)
  [ -n "$nic" ] && break
  sleep 0.1
done
set -a; . /lab/share/environment; set +a
if [ -n "$nic" ]; then
  ip link set "$nic" up
  ip addr add 10.0.2.15/24 dev "$nic"
  [ "$LAB_OFFLINE" = 1 ] || ip route add default via 10.0.2.2
else
  echo "lab: the guest has no network interface" >&2
fi
if [ "$LAB_OFFLINE" = 1 ]; then
  # No resolver at all, and nothing outside answers: QEMU's network is restricted to the one
  # forward to the host's Docker engine.
  : > /etc/resolv.conf
  export OPENCODE_SANDBOX_LAB_OFFLINE=1
else
# A stand-in for the internet, for tests whose servers must look like the internet's: names under
# lab.test resolve to LAB_INTERNET, a public address that lives in a network namespace of its own
# (so it is not one of this machine's addresses, which policies treat apart), and its ports 443
# and 8080 lead back here, to ports 8443 and 8080 on 10.200.0.1, where such tests serve.
LAB_INTERNET=1.2.3.4
ip netns add internet
ip link add lab-inet type veth peer name inet0 netns internet
ip addr add 10.200.0.1/30 dev lab-inet
ip link set lab-inet up
ip -n internet link set lo up
ip -n internet addr add 10.200.0.2/30 dev inet0
ip -n internet addr add "$LAB_INTERNET/32" dev lo
ip -n internet link set inet0 up
ip -n internet route add default via 10.200.0.1
ip route add "$LAB_INTERNET/32" via 10.200.0.2
for ports in 443:8443 8080:8080; do
  ip netns exec internet socat "TCP-LISTEN:${ports%%:*},bind=$LAB_INTERNET,reuseaddr,fork" \
    "TCP:10.200.0.1:${ports##*:}" &
done
if dnsmasq --no-resolv --no-hosts --server=10.0.2.3 --address=/lab.test/$LAB_INTERNET --local-ttl=300 \
    --listen-address=127.0.0.1 --bind-interfaces --user=root; then
  printf 'nameserver 127.0.0.1\n' > /etc/resolv.conf
  export OPENCODE_SANDBOX_LAB_INTERNET=$LAB_INTERNET
else
  echo "lab: dnsmasq did not start: no stand-in for the internet" >&2
fi
fi
if modprobe kvm_amd; then
  chgrp kvm /dev/kvm && chmod 660 /dev/kvm
else
  echo "lab: kvm_amd did not load" >&2
fi
cd /opt/lab/src
if [ "$LAB_AS_USER" = 1 ]; then
  chown -R tester: /opt/lab/src
  runuser -u tester -- env HOME=/home/tester USER=tester LOGNAME=tester bash /lab/share/command \
    < /dev/null 2>&1 | tee /lab/share/output.log
else
  bash /lab/share/command < /dev/null 2>&1 | tee /lab/share/output.log
fi
echo "${PIPESTATUS[0]}" > /lab/share/exit-code
sync
umount /lab/share
echo o > /proc/sysrq-trigger
sleep 60
INIT
  chmod 755 "$1"
}

make_disk() {
  local started; started=$(date +%s)
  rm -f "$RUN/disk.img"
  truncate -s 20G "$RUN/disk.img"
  mkfs.ext4 -q -F -E root_owner=0:0 -d "$BASE/rootfs" "$RUN/disk.img"
  say "disk image made in $(seconds_since "$started") s"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

FORWARD_PID=
QEMU_PID=
WHEELS_MOUNT=
RUN=
cleanup() {
  # The guest writes to the run folder until QEMU is gone: wait for it before removing that.
  [ -n "$QEMU_PID" ] && { kill "$QEMU_PID"; wait "$QEMU_PID"; } 2>/dev/null || true
  [ -n "$WHEELS_MOUNT" ] && umount "$WHEELS_MOUNT" 2>/dev/null || true
  [ -n "$FORWARD_PID" ] && kill "$FORWARD_PID" 2>/dev/null || true
  [ -n "$RUN" ] && rm -rf "$RUN" || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_engine_forward() {
  ENGINE_PORT=$(free_port)
  socat "TCP-LISTEN:$ENGINE_PORT,bind=127.0.0.1,reuseaddr,fork" UNIX-CONNECT:/var/run/docker.sock &
  FORWARD_PID=$!
}

# Waits for one of SLOTS boot slots and holds it (file descriptor 8) until the script ends.
take_slot() {
  local waited=0 slot
  while :; do
    for slot in $(seq "$SLOTS"); do
      exec 8>"$CACHE/slot-$slot.lock"
      if flock -n 8; then
        if [ "$waited" = 1 ]; then say "got lab slot $slot"; fi
        return
      fi
      exec 8>&-
    done
    [ "$waited" = 1 ] || say "all $SLOTS lab slots are busy: waiting for a run to end"
    waited=1
    sleep 5
  done
}

# One boot: 0 when the guest wrote COMMAND's exit code (in $RUN/share/exit-code).
boot_once() {
  rm -rf "$RUN/share"
  mkdir -p "$RUN/share"
  chmod 777 "$RUN/share"
  {
    if [ "$offline" = 1 ]; then
      printf 'DOCKER_HOST=tcp://%s:2375\n' "$OFFLINE_ENGINE_ADDRESS"
    else
      printf 'DOCKER_HOST=tcp://10.0.2.2:%s\n' "$ENGINE_PORT"
    fi
    printf 'LAB_OFFLINE=%s\n' "$offline"
    printf 'LAB_AS_USER=%s\n' "$as_user"
    printf 'LANG=C.UTF-8\nTERM=xterm-256color\nPYTHONUNBUFFERED=1\n'
    # A first opencode serve takes minutes of emulated CPU in a microVM here.
    printf 'OPENCODE_SANDBOX_DAEMON_START_TIMEOUT=20m\n'
    # One virtual CPU per microVM, as the guest has: a second one starves the first on the one
    # emulated CPU (soft lockups of msb's vCPU threads), slowing the microVM a hundredfold.
    printf 'OPENCODE_SANDBOX_CPUS=1\n'
  } > "$RUN/share/environment"
  printf '%q ' "${command_args[@]}" > "$RUN/share/command"
  echo >> "$RUN/share/command"
  # The cached guest is shared: refresh it and copy it to this run's disk under a lock.
  flock 9
  refresh_guest
  make_disk
  flock -u 9
  local started; started=$(date +%s)
  local network=user,id=n0
  if [ "$offline" = 1 ]; then
    network="user,id=n0,restrict=on,guestfwd=tcp:$OFFLINE_ENGINE_ADDRESS:2375-cmd:socat - TCP:127.0.0.1:$ENGINE_PORT"
  fi
  say "booting the guest (QEMU TCG, 1 vCPU, $MEMORY_MIB MiB) to run as $(who_runs): ${command_args[*]}"
  set +e
  timeout -k 10 "$BOOT_TIMEOUT" qemu-system-x86_64 \
    -accel tcg,thread=multi -cpu max -smp 1 -m "$MEMORY_MIB" \
    -kernel "$BASE/vmlinuz" -initrd "$BASE/initrd.img" \
    -append 'root=/dev/vda rw console=ttyS0 quiet panic=-1 init=/lab-init.sh' \
    -drive "file=$RUN/disk.img,format=raw,if=virtio,cache=unsafe" \
    -netdev "$network" -device virtio-net-pci,netdev=n0 \
    -virtfs "local,path=$RUN/share,mount_tag=share,security_model=none" \
    -display none -serial stdio -monitor none -nodefaults -no-reboot < /dev/null > >(sed -u 's/\r$//') &
  QEMU_PID=$!
  wait "$QEMU_PID"
  local qemu_status=$?
  QEMU_PID=
  set -e
  say "guest ran for $(seconds_since "$started") s (QEMU exit status $qemu_status)"
  if [ ! -s "$RUN/share/exit-code" ]; then
    if [ "$qemu_status" = 124 ]; then
      say "LAB FAILURE: the guest did not finish within $BOOT_TIMEOUT s"
    else
      say "LAB FAILURE: the guest died before COMMAND finished (QEMU crash, triple fault or guest panic); this is not a test result"
    fi
    return 1
  fi
}

main() {
  local started; started=$(date +%s)
  mkdir -p "$CACHE"
  RUN=$(mktemp -d "$CACHE/run.XXXXXX")
  ensure_host_packages
  exec 9>"$CACHE/guest.lock"
  flock 9
  ensure_base
  PROJECT_WHEEL=$(build_project_wheel "$RUN/project")
  ensure_dependency_wheels
  flock -u 9
  take_slot
  start_engine_forward
  local pass outcome=0 summary=()
  for pass in $passes; do
    as_user=$pass
    local status=0
    run_pass || status=$?
    summary+=("as $(who_runs): $(describe_status "$status")")
    if [ "$status" = 255 ]; then outcome=3; elif [ "$outcome" = 0 ]; then outcome=$status; fi
  done
  local line; line=$(printf '%s; ' "${summary[@]}")
  say "${line}whole lab run $(seconds_since "$started") s"
  exit "$outcome"
}

who_runs() { if [ "$as_user" = 1 ]; then echo "$LAB_USER"; else echo root; fi; }
describe_status() { if [ "$1" = 255 ]; then echo "LAB FAILURE (no result)"; else echo "COMMAND exited with $1"; fi; }

# COMMAND in a fresh guest as root or tester, the guest retried once if it dies: COMMAND's exit
# status, or 255 when the guest died twice.
run_pass() {
  local attempt
  for attempt in 1 2; do
    if boot_once; then
      local status; status=$(cat "$RUN/share/exit-code")
      say "COMMAND exited with $status (as $(who_runs))"
      return "$status"
    fi
    [ "$attempt" = 1 ] && say "retrying the lab run once"
  done
  say "LAB FAILURE: the guest died twice; no result"
  return 255
}

main
