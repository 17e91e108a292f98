"""Command-line tools around a SLAM run: measure it on a device, profile the tracker (and the
mapper), project the profile to Jetsons, and the research tools that judge or calibrate it
(docs/ARCHITECTURE.md, "Tools"). Nothing here is imported by a run; each module is one tool with
its own ``main``, but for ``jetson_model``: the model ``slam_jetson_projection`` projects with.

Console commands (setup.py): ``slam_measure_device``, ``slam_profile``, ``slam_jetson_projection``,
``slam_color_registration``. The research tools run as ``python -m slam.tools.<name>``.
"""
