"""ROS wrapper of the SLAM system (ROS 1 rospy node, ROS 2 rclpy node) - see docs/ROS.md.

Nothing else in ``slam`` imports this package. Everything except the nodes and the players
(``ros1_node``, ``ros2_node``, ``ros1_player``, ``ros2_player``: tested against real ROS 1 and
ROS 2 in tests/test_ros1_integration.py and tests/test_ros2_integration.py) is middleware-free
(numpy + the SLAM core) and is unit-tested with ``rosbags`` messages:

- ``params``       node parameters beyond the SLAM config (frames, throttles, queue policy)
- (``slam.data.stamp_matcher`` pairs colour and depth messages by header stamp, drops counted)
- ``assemble``     paired messages + CameraInfo -> ``Frame`` (waits for CameraInfo)
- ``live_source``  a bounded ``FrameSource`` fed by callbacks (backpressure or drop-oldest)
- ``out_data``     SLAM outputs -> plain data: odometry, REP-105 transforms, cloud, image
- ``messages``     plain data -> message objects of any flavour (rospy, rclpy, rosbags)
- ``bridge``       the node logic shared by both nodes: callbacks in, publishers out, run folder
- ``playback``     the frames the players publish (and the tests' bags hold): rgb8, 16UC1 mm
"""
