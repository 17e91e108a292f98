#!/usr/bin/env bash
# Install ROS 1 (Noetic-era packages carried by Debian 12) for the ROS 1 integration test.
#
# Idempotent: does nothing when every package is already installed. Needs root (CI runs as
# root) or passwordless sudo. The packages install into /usr/lib/python3/dist-packages for
# Debian's own python3 (3.11); tests add that path to PYTHONPATH *after* the venv's
# site-packages. Debian 12 has no ROS 2 packages.
#
#   bash scripts/install_ros1.sh          # install (or check) the packages
#   bash scripts/install_ros1.sh --check  # exit 0 if installed, 1 if not; installs nothing
set -euo pipefail

PACKAGES=(
  ros-core                  # rosmaster, rosout, roslaunch, rosbag, rostopic ...
  python3-rospy
  python3-rosgraph
  python3-rosbag
  python3-std-msgs
  python3-std-srvs
  python3-sensor-msgs
  python3-nav-msgs
  python3-geometry-msgs
  python3-tf2-ros
  python3-tf2-msgs
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_ros1: ROS 1 packages already installed"
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  echo "install_ros1: missing: ${missing[*]}"
  exit 1
fi

SUDO=""
if [[ "$(id -u)" != "0" ]]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install_ros1: need root (or sudo) to apt-get install: ${missing[*]}" >&2; exit 2; fi
fi
echo "install_ros1: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install_ros1: done ($(command -v rosmaster || echo 'rosmaster not on PATH'))"
