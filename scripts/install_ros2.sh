#!/usr/bin/env bash
# Install ROS 2 Jazzy's Python client into the venv ($VENV, default .venv) for the ROS 2 node test.
#
# The wheels come from PyPI (ros-jazzy-*, built for CPython 3.11 on x86-64 only; about 250 MB):
# rclpy with the Fast DDS middleware, and the message packages the node uses. There are no tf2
# wheels: the node then publishes no TF (docs/ROS.md). On a robot use the apt packages of your
# ROS 2 distribution instead (docs/ROS.md, docs/JETSON.md).
#
# ros-wheels-bootstrapper (a dependency of the wheels) adds a .pth file that re-executes every
# python of this venv once at start-up, with LD_LIBRARY_PATH naming the wheels' shared libraries
# (about 50 ms per start). The ROS 1 node still imports ROS 1's message packages from Debian's
# dist-packages even though ROS 2 packages of the same names are now in the venv
# (slam.ros.ros1_node.import_rospy).
#
#   VENV=.venv bash scripts/install_ros2.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PACKAGES=(
  "ros-jazzy-rclpy[fastrtps]==7.1.6"   # rclpy + rmw_fastrtps_cpp (Fast DDS)
  "ros-jazzy-std-msgs==5.3.6"          # std_msgs/String (tracking status)
  "ros-jazzy-sensor-msgs==5.3.6"       # Image, CameraInfo, PointCloud2
  "ros-jazzy-nav-msgs==5.3.6"          # Odometry
  "ros-jazzy-geometry-msgs==5.3.6"
  "ros-jazzy-std-srvs==5.3.6"          # Trigger (save_map)
)
tag=$("$VENV/bin/python" -c 'import platform, sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}-{platform.machine()}")')
if [ "$tag" != "cp311-x86_64" ]; then
  echo "install_ros2: the ros-jazzy-* wheels exist for CPython 3.11 on x86-64 only (this venv: $tag);" \
       "install your ROS 2 distribution's apt packages instead (docs/ROS.md)" >&2
  exit 2
fi
"$VENV/bin/python" -m pip install -q "${PACKAGES[@]}"
# The check runs in a new process: the bootstrapper's re-exec sets the library path.
"$VENV/bin/python" -c "import rclpy, sensor_msgs.msg, nav_msgs.msg, std_msgs.msg, std_srvs.srv, rmw_fastrtps_cpp" \
  || { echo "install_ros2: rclpy does not import after the install" >&2; exit 1; }
echo "install_ros2: ROS 2 Jazzy rclpy installed into $VENV"
