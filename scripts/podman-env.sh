# Sourced by the image scripts: the podman/buildah settings this project uses
# everywhere (measured in containers.md): runc with the cgroupfs manager,
# default ulimits off, and a storage root private to the project.
#
#   BUZZ_IMAGE_CACHE   cache root (default: ${XDG_CACHE_HOME:-~/.cache}/buzz-image)
#
# Defines: buzz_podman, buzz_buildah (functions), and exports CONTAINERS_CONF,
# BUZZ_PODMAN_ROOT, BUZZ_PODMAN_RUNROOT (the tests read the same names).
BUZZ_IMAGE_CACHE="${BUZZ_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/buzz-image}"
export BUZZ_PODMAN_ROOT="${BUZZ_PODMAN_ROOT:-$BUZZ_IMAGE_CACHE/storage}"
export BUZZ_PODMAN_RUNROOT="${BUZZ_PODMAN_RUNROOT:-$BUZZ_IMAGE_CACHE/run}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$BUZZ_IMAGE_CACHE/containers.conf}"
mkdir -p "$BUZZ_PODMAN_ROOT" "$BUZZ_PODMAN_RUNROOT"
if [[ ! -f $CONTAINERS_CONF ]]; then
  # The VM lacks CAP_SYS_RESOURCE: podman's default ulimits would fail setrlimit.
  printf '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n' >"$CONTAINERS_CONF"
fi
buzz_podman() {
  podman --root "$BUZZ_PODMAN_ROOT" --runroot "$BUZZ_PODMAN_RUNROOT" --storage-driver overlay \
    --runtime runc --cgroup-manager cgroupfs "$@"
}
buzz_buildah() {
  buildah --root "$BUZZ_PODMAN_ROOT" --runroot "$BUZZ_PODMAN_RUNROOT" --storage-driver overlay "$@"
}
