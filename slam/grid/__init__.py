"""The 2D occupancy grid for navigation: the keyframes' depth at their current poses, free along
the rays and occupied where surfaces fall in the robot's height band, on the floor found by
``floor`` (docs/NAVIGATION.md). ``scan`` (a keyframe's depth as the grid keeps it), ``floor``
(up and the floor's height), ``raycast`` (one keyframe's evidence), ``occupancy`` (counts and the
published ``GridSnapshot``), ``builder`` (the grid thread), ``export`` (map_server files, PNG)."""
