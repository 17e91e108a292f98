"""What the players record of the node's outputs, middleware-free.

``ros1_player`` and ``ros2_player`` subscribe to the node's topics with their own middleware and
hand every message to an ``OutputRecord``, which keeps plain rows (for the players' JSON record)
under one lock and lets the publishing thread wait for them:

- odometry: [stamp s, frame, child, x y z qx qy qz qw]
- status: the status strings
- tf: [stamp s, parent, child, x y z qx qy qz qw] per transform
- clouds: [stamp s, frame, width, point_step, field names]
- images: [stamp s, encoding, width, height] (+ the mean byte value with ``image_mean``)
- grids: [stamp s, frame, width, height, resolution, occupied cells (>= 65), free cells (0..19),
  unknown cells (-1)] (the node publishes trinary grids: 100, 0, -1)
"""
from __future__ import annotations

import threading
import time
from typing import Callable


class OutputRecord:
    """Plain records of the node's outputs (any thread may read them under ``lock``).

    ``stamp_seconds(header.stamp) -> float`` reads a message stamp (the ROS 1 and ROS 2 time types
    name their fields differently); ``poll_s`` bounds how long ``wait`` sleeps between checks of a
    record that does not notify."""

    def __init__(self, stamp_seconds: Callable[[object], float], image_mean: bool, poll_s: float) -> None:
        self.lock = threading.Condition()
        self.odom, self.status, self.tf, self.clouds, self.images, self.grids = [], [], [], [], [], []
        self._t = stamp_seconds
        self._image_mean = image_mean
        self._poll_s = poll_s

    def on_odom(self, m) -> None:
        p, q = m.pose.pose.position, m.pose.pose.orientation
        with self.lock:
            self.odom.append([self._t(m.header.stamp), m.header.frame_id, m.child_frame_id,
                              p.x, p.y, p.z, q.x, q.y, q.z, q.w])
            self.lock.notify_all()

    def on_status(self, m) -> None:
        with self.lock:
            self.status.append(m.data)

    def on_tf(self, m) -> None:
        with self.lock:
            for t in m.transforms:
                a, q = t.transform.translation, t.transform.rotation
                self.tf.append([self._t(t.header.stamp), t.header.frame_id, t.child_frame_id,
                                a.x, a.y, a.z, q.x, q.y, q.z, q.w])

    def on_cloud(self, m) -> None:
        with self.lock:
            self.clouds.append([self._t(m.header.stamp), m.header.frame_id, m.width, m.point_step,
                                [f.name for f in m.fields]])

    def on_image(self, m) -> None:
        row = [self._t(m.header.stamp), m.encoding, m.width, m.height]
        if self._image_mean:
            row.append(sum(m.data) / max(1, len(m.data)))
        with self.lock:
            self.images.append(row)

    def on_grid(self, m) -> None:
        data = [int(v) for v in m.data]
        row = [self._t(m.header.stamp), m.header.frame_id, m.info.width, m.info.height, m.info.resolution,
               sum(v >= 65 for v in data), sum(0 <= v < 20 for v in data), sum(v < 0 for v in data)]
        with self.lock:
            self.grids.append(row)
            self.lock.notify_all()

    def wait(self, what: str, n: int, timeout_s: float) -> bool:
        """Wait until ``len(self.<what>) >= n``; False on timeout."""
        end = time.monotonic() + timeout_s
        with self.lock:
            while len(getattr(self, what)) < n:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.lock.wait(min(left, self._poll_s))
            return True
