"""Loop closure, the loop stage's thread: revisit detection among keyframes (``descriptor``),
geometric verification (``verify``: ORB + PnP, ICP on depth, render-and-compare with the map) with
the measurement's own information (``information``), the tests a verified loop must pass before it
is closed (``acceptance``: separation, consistent detections, significance), a robust pose graph of
keyframes (``pose_graph``, gtsam), a depth check of every correction (``guard``) and the stage
itself (``closer``); the mapper applies the corrections it sends (``messages``)."""
