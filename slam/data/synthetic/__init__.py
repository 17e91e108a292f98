"""Synthetic RGB-D sequences ray cast in one procedural room: the bundled sample (``sample``:
datasets/sample) and a looping sequence for loop closure (``loop``: slam_suite's generated
entry). ``room`` holds the scene, camera and renderer; ``textures`` its materials. Needs open3d
(imported lazily) to render.
"""
