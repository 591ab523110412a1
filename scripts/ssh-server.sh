#!/usr/bin/env bash
# A real server for the SSH provider (issue 51, "The test server"), on this
# machine: a podman container with systemd as PID 1 and OpenSSH's sshd,
# built offline from Debian's packages as the sprig image's base is, with
# one non-root user, `agent`, whose `systemd --user` lingers. Login is by
# key only, and sshd listens on 127.0.0.1 only. The container shares the
# host's network (containers.md), so a harness on it reaches a relay on the
# loopback the way the suite's relays listen.
#
#   scripts/ssh-server.sh up [--name NAME] [--port PORT] [--no-linger] [--home-size SIZE]
#   scripts/ssh-server.sh down [--name NAME]
#
# `up` starts a fresh server (a running one of that name is replaced) and
# prints what a client needs, also kept in $dir/env ($dir is below):
#
#   BUZZ_SSH_SERVER_HOST=agent@127.0.0.1
#   BUZZ_SSH_SERVER_PORT=PORT
#   BUZZ_SSH_SERVER_IDENTITY=$dir/id_ed25519       the client's key (0600)
#   BUZZ_SSH_SERVER_KNOWN_HOSTS=$dir/known_hosts   the server's host key
#   BUZZ_SSH_SERVER_CONFIG=$dir/ssh_config         `Host NAME` with all of it
#
# so `ssh -F "$BUZZ_SSH_SERVER_CONFIG" NAME` logs in, and a user can point
# the provider at it. Each `up` makes a new host key: a client that kept the
# old one sees a changed host key, which is what a test of that wants.
#
#   --port PORT       sshd's port on 127.0.0.1 (default: a free one)
#   --no-linger       the user does not linger: its `systemd --user` lives
#                     only while a session is open (a host set up wrong)
#   --home-size SIZE  the user's home is a tmpfs of SIZE (`8m`): a full disk
#
# Default NAME: buzz-ssh-server. $dir: $BUZZ_IMAGE_CACHE/ssh-server/NAME.
# Needs root (rootful podman, as every container of this project here).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { printf '== %s\n' "$*" >&2; }
die() { printf 'ssh-server.sh: %s\n' "$*" >&2; exit 1; }

cmd="${1:-}"
[[ $cmd == up || $cmd == down ]] || die "usage: $0 up|down [--name NAME] [--port PORT] [--no-linger] [--home-size SIZE]"
shift
name=buzz-ssh-server port="" linger=yes home_size=""
while (($#)); do
  case "$1" in
    --name) name="${2:?--name needs a value}"; shift 2 ;;
    --port) port="${2:?--port needs a value}"; shift 2 ;;
    --no-linger) linger=no; shift ;;
    --home-size) home_size="${2:?--home-size needs a value}"; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
[[ $name =~ ^[a-z0-9][a-z0-9-]{0,40}$ ]] || die "--name $name: lowercase letters, digits and '-'"
[[ -z $port || $port =~ ^[0-9]{2,5}$ ]] || die "--port $port: a port number"
[[ -z $home_size || $home_size =~ ^[0-9]+[kmg]$ ]] || die "--home-size $home_size: a size like 8m"
[[ $(id -u) == 0 ]] || die "the server runs in rootful podman (containers.md). fix: sudo $0 $cmd"
for c in podman runc mmdebstrap ssh ssh-keygen; do
  command -v "$c" >/dev/null 2>&1 || die "$c not found. fix: apt-get update && apt-get install -y podman runc mmdebstrap openssh-client"
done

# shellcheck source=podman-env.sh
. "$root/scripts/podman-env.sh"
dir="$BUZZ_IMAGE_CACHE/ssh-server/$name"

down() {
  buzz_podman rm --force --time 3 "$name" >/dev/null 2>&1 || true
}

if [[ $cmd == down ]]; then
  down
  rm -rf "$dir"
  exit 0
fi

# --- the image, cached by what shapes it ----------------------------------------
packages=(systemd systemd-sysv dbus libpam-systemd openssh-server procps ca-certificates)
# The customize hook: no host key baked in (each `up` mounts its own), the
# user, its lingering, and where sshd reads its authorized keys (outside the
# home, so a tmpfs home does not hide them). Units a server in a container
# has no use for are masked: a quicker boot, no failed units.
hook='rm -f "$1"/etc/ssh/ssh_host_*
chroot "$1" useradd --create-home --uid 1000 --shell /bin/bash agent
mkdir -p "$1"/var/lib/systemd/linger "$1"/etc/ssh/authorized_keys
touch "$1"/var/lib/systemd/linger/agent
for u in getty@tty1.service console-getty.service systemd-logind-varlink.socket apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
  ln -sf /dev/null "$1/etc/systemd/system/$u"
done'
key="$(printf '%s|' v1 bookworm "${packages[@]}" "$hook" | sha256sum | cut -c1-12)"
image="localhost/buzz-ssh-server:$key"
# One build at a time: servers started side by side (the suite's) wait for
# the first one's build instead of writing the same rootfs at once.
exec 8>"$BUZZ_IMAGE_CACHE/ssh-server-build.lock"
flock 8
if ! buzz_podman image exists "$image"; then
  tar="$BUZZ_IMAGE_CACHE/base/ssh-server-$key.tar"
  if [[ ! -s $tar ]]; then
    say "the server's rootfs: mmdebstrap --variant=minbase bookworm with systemd and sshd (about two minutes, once)"
    mkdir -p "$(dirname "$tar")"
    part="${tar%.tar}.part.tar"
    rm -f "$part"
    mmdebstrap --quiet --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" \
      --customize-hook="$hook" bookworm "$part" >&2
    mv "$part" "$tar"
  fi
  buzz_podman import --quiet --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' "$tar" "$image" >/dev/null
fi
exec 8>&-

# --- this server's keys and sshd settings ------------------------------------------
down
rm -rf "$dir"
mkdir -p "$dir"
chmod 700 "$dir"
ssh-keygen -q -t ed25519 -N '' -C "buzz-ssh-server host" -f "$dir/host_ed25519"
ssh-keygen -q -t ed25519 -N '' -C "buzz-ssh-server client" -f "$dir/id_ed25519"
if [[ -z $port ]]; then
  # A free port on the loopback, above the ephemeral range's usual start.
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 10000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then port=$p; break; fi
  done
  [[ -n $port ]] || die "no free port found on 127.0.0.1. fix: pass --port PORT"
fi
cat >"$dir/sshd.conf" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey /etc/ssh/ssh_host_ed25519_key
AuthorizedKeysFile /etc/ssh/authorized_keys/%u
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowUsers agent
EOF
cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
chmod 644 "$dir/authorized_keys" "$dir/sshd.conf"

run=(run --detach --name "$name" --network host --systemd always
  --ulimit nofile=10000:10000 --ulimit nproc=10000:10000
  -v "$dir/host_ed25519:/etc/ssh/ssh_host_ed25519_key:ro"
  -v "$dir/sshd.conf:/etc/ssh/sshd_config.d/buzz.conf:ro"
  -v "$dir/authorized_keys:/etc/ssh/authorized_keys/agent:ro")
[[ -z $home_size ]] || run+=(--tmpfs "/home/agent:size=$home_size,mode=0755")
buzz_podman "${run[@]}" "$image" >/dev/null
[[ -z $home_size ]] || buzz_podman exec "$name" chown agent:agent /home/agent
if [[ $linger == no ]]; then
  buzz_podman exec "$name" rm -f /var/lib/systemd/linger/agent
fi

printf '[127.0.0.1]:%s %s\n' "$port" "$(cut -d' ' -f1,2 "$dir/host_ed25519.pub")" >"$dir/known_hosts"
cat >"$dir/ssh_config" <<EOF
Host $name
  HostName 127.0.0.1
  Port $port
  User agent
  IdentityFile $dir/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $dir/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
EOF
cat >"$dir/env" <<EOF
BUZZ_SSH_SERVER_HOST=agent@127.0.0.1
BUZZ_SSH_SERVER_PORT=$port
BUZZ_SSH_SERVER_IDENTITY=$dir/id_ed25519
BUZZ_SSH_SERVER_KNOWN_HOSTS=$dir/known_hosts
BUZZ_SSH_SERVER_CONFIG=$dir/ssh_config
EOF

# Up when a login reaches the user's systemd (with lingering, its manager
# runs from boot; without, the login starts it).
for _ in $(seq 100); do
  if ssh -F "$dir/ssh_config" "$name" 'systemctl --user is-system-running --wait' >/dev/null 2>&1; then
    cat "$dir/env"
    exit 0
  fi
  sleep 0.2
done
die "the server did not accept a login within 20 s; its journal: $(buzz_podman exec "$name" journalctl --no-pager -n 20 2>&1)"
