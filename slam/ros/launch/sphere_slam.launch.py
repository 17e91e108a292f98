"""ROS 2 (Humble) launch file: sphere-splatting SLAM on a RealSense-style RGB-D stream.

    ros2 launch /path/to/slam/ros/launch/sphere_slam.launch.py config:=base.yaml \
        overrides:="['system.device=cuda']"
The node is the pip-installed console script ``slam_ros2_node`` (no colcon package needed); it
must be on PATH of the shell that sources /opt/ros/humble/setup.bash. The node itself is tested
with ROS 2 Jazzy's wheels (tests/test_ros2_integration.py); this launch file is not (`ros2 launch`
is not among those wheels).
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess
from launch.substitutions import LaunchConfiguration

ARGS = {
    "config": "base.yaml",
    "overrides": "['']",
    "out": "''",                                               # YAML empty string
    "color_topic": "/camera/camera/color/image_raw",              # realsense2_camera 4.x on Humble
    "depth_topic": "/camera/camera/aligned_depth_to_color/image_raw",
    "camera_info_topic": "/camera/camera/color/camera_info",
    "map_frame": "map",
    "odom_frame": "odom",
    "tf_mode": "auto",
    "queue_policy": "drop_oldest",
    "input_reliability": "best_effort",                        # reliable: lossless bag replay
    "cloud_period_s": "2.0",
    "render_period_s": "0.0",
}


def generate_launch_description():
    params = []
    for name in ARGS:
        params += ["-p", [f"{name}:=", LaunchConfiguration(name)]]
    return LaunchDescription(
        [DeclareLaunchArgument(name, default_value=value) for name, value in ARGS.items()]
        + [ExecuteProcess(cmd=["slam_ros2_node", "--ros-args", "-r", "__node:=sphere_slam", *params],
                          output="screen", sigterm_timeout="60")]
    )
