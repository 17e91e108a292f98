"""Loop closure, the loop stage's thread: revisit detection among keyframes (``descriptor``),
geometric verification (``verify``: ORB + PnP, ICP on depth, render-and-compare with the map), a
pose graph of keyframes (``pose_graph``, gtsam) and the stage itself (``closer``); the mapper
applies the corrections it sends (``messages``)."""
