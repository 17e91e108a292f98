"""The typed configuration schema: one dataclass per section, every key documented where it is
declared. Loading, inheritance, overrides and validation are in ``slam.config.loading``."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import List, Literal, Optional


@dataclass
class DataConfig:
    """Where frames come from and how they are subsampled."""

    dataset: Literal["tum", "7scenes", "replica", "rosbag", "realsense"] = "tum"
    path: str = "sample"            # folder, bag or recording; "sample" = the bundled sample;
                                    # a registry name (slam_data list) or "live": docs/DATA.md
    download: bool = True           # fetch a registry sequence missing from the data cache
    realsense: List[int] = field(default_factory=lambda: [640, 480, 30])  # live [w, h, fps]
    stride: int = 1                 # take every stride-th frame
    first: int = 0                  # first frame index (before stride)
    last: Optional[int] = None      # one past the last frame index (before stride); None = to the end
    downscale: int = 1              # integer factor applied to both images and K
    intrinsics: Optional[List[float]] = None   # [fx, fy, cx, cy] override (required for replica)
    distortion: Optional[List[float]] = None   # OpenCV k1 k2 p1 p2 [k3] override
    depth_scale: Optional[float] = None        # raw depth units per metre override
    rolling_shutter_s: float = 0.0  # s, the sensor's readout from the first row to the last (0: global
                                    # shutter; negative: rows read bottom to top, e.g. a camera mounted
                                    # upside down whose driver turns the image 180 deg); the tracker then
                                    # resamples each frame into its middle row's camera from the recent
                                    # turn rate (slam/tracking/rolling_shutter.py)
    depth_rolling_shutter_s: Optional[float] = None  # s, the depth image's readout (None: as the colour's)
    sync_depth: bool = False        # a depth image taken apart from its colour (the source's
                                    # depth_timestamp: TUM's depth.txt) is turned to the colour's time
                                    # by the recent turn rate (slam/tracking/rolling_shutter.py)
    # Unregistered colour (7-Scenes, raw Kinect v1): the colour camera's [fx, fy, cx, cy] and the
    # depth-to-colour translation [tx, ty, tz] (m); colour is resampled into the depth camera.
    # slam_color_registration estimates both from the data.
    color_intrinsics: Optional[List[float]] = None
    color_translation: Optional[List[float]] = None
    max_time_diff: float = 0.02     # s, colour/depth/ground-truth association tolerance
    color_topic: str = "/camera/color/image_raw"
    depth_topic: str = "/camera/aligned_depth_to_color/image_raw"
    camera_info_topic: str = "/camera/color/camera_info"
    repeat: int = 1                 # play the sequence this many times (soak tests)
    read_threads: int = 2           # folder datasets: threads that read and decode images ahead of
                                    # the tracker (0: one at a time in the reading thread). Decoding
                                    # a 7-Scenes frame takes ~5 ms of CPU (its depth PNG 4): one
                                    # thread held the H200 system below 100 FPS


@dataclass
class RasterConfig:
    backend: Literal["auto", "cuda", "cpu", "reference"] = "auto"   # reference: the PyTorch oracles
                                    # (renders and the tracker's LM; dense, small images only)


@dataclass
class TrackingConfig:
    """The tracker (slam/tracking/tracker.py) and its one solver (slam/tracking/fused.py): one
    rasterizer pass per Levenberg-Marquardt evaluation gives the normal equations, the LM state
    stays on the device (one host wait per frame)."""

    cuda_graph: bool = True         # on CUDA: each frame's LM (all levels) is one captured CUDA
                                    # graph (rasterizer/lm_state.py; no host wait inside a frame
                                    # either way); false: the same kernels queued one by one
    iters: int = 8                  # Gauss-Newton (LM) iterations per frame, all pyramid levels
    damping: float = 1e-3           # initial Levenberg-Marquardt damping (relative to diag(H))
    damping_down: float = 0.3       # damping factor after an accepted LM step ...
    damping_up: float = 10.0        # ... and after a rejected one
    lm_attempts: int = 4            # damped steps tried per iteration before giving up (converged)
    huber_color: float = 0.1        # Huber threshold of the colour residuals (0-1 intensity)
    huber_depth: float = 0.05       # Huber threshold of the depth residuals (m)
    depth_weight: float = 1.0       # lambda in L1 colour + lambda * L1 depth
    alpha_threshold: float = 0.95   # pixels with rendered alpha above this count as known
    pyramid_levels: int = 2         # coarse-to-fine levels (1 = the finest only)
    coarse_share: float = 0.6       # share of the iterations spent on the coarser levels
    downscale: int = 1              # frames are tracked (and relocalised) at the input / this
                                    # factor: the finest pyramid level
    exposure: bool = True           # per-frame affine exposure (gain, bias) on colour
    min_known_fraction: float = 0.05  # a map covering less of the valid depth than this = nothing
                                    # to judge the pose by (a dropout, a view away from the map).
                                    # Above it a low coverage is exploration, not failure: the
                                    # covered part must agree (quality.*), and the frame's keyframe
                                    # grows the map where it is new (at 0.2, a camera turning into
                                    # new ground was flagged frame after frame and the map stopped)
    recovery_iters: int = 20        # iterations for a recovery attempt
    converged_step: float = 1e-5    # stop a level when the pose step is below this (rad / m)
    obs_gradient: float = 0.5       # every pyramid level: share of the observed
                                    # frame's image gradients in the pose Jacobian (ESM's blend
                                    # with the render's exact derivatives: wider convergence from a
                                    # distant prior, and a more accurate pose where the render is
                                    # sharp than exact rows at the finest level give:
                                    # docs/benchmarks.md#why-the-defaults-are-what-they-are); 0 =
                                    # exact only


@dataclass
class QualityConfig:
    """The tracking-quality test (slam/tracking/quality.py): evidence of the final pose, judged
    against absolute floors and against the sequence's recent level (the frames that passed).
    Chosen as a detector on both real sequences, right vs wrong poses
    (python -m slam.tools.calibrate_quality; docs/benchmarks.md#quality-test-as-a-detector)."""

    # The sensor's depth noise model: a depth inlier is within floor + quad * z^2 of the render.
    # A sensor family's values belong in its config (configs/kinect_v1.yaml, realsense.yaml);
    # these defaults are Kinect v1's: ~3.5 sigma of structured-light noise (sigma ~ 1.4e-3 z^2)
    # plus 2 cm for registration, quantisation and map edges.
    depth_noise_floor: float = 0.02   # m
    depth_noise_quad: float = 0.005   # 1/m
    color_tol: float = 0.1            # colour inlier: mean |error| after exposure, 0-1 intensity
    # Absolute floors (any sensor, any motion): a right pose never has fewer.
    min_depth_inliers: float = 0.5    # share of the covered pixels that must be depth inliers
    min_color_inliers: float = 0.5    # share of the covered pixels that must be colour inliers
    # Relative to the recent level (the median loss of the last frames that passed the floors):
    residual_spike: float = 2.5       # a final loss above this x the recent median = failure
    weak_spike: float = 2.0           # ... and a loss above this x the recent median together
    weak_depth_inliers: float = 0.9   # with depth inliers below this = failure (both moderately off)
    # Exploration: a frame flagged by the depth-inlier floor alone whose colour inliers reach this
    # stays flagged but may make a keyframe, so the map keeps growing into a view it trails (a fast
    # turn, a map behind the tracker). Perturbed poses the calibration called wrong kept <= 0.84
    # colour inliers below that floor, right ones >= 0.78 (docs/benchmarks.md#quality-test-as-a-detector).
    # Above 1: never (a flagged frame makes no keyframe).
    explore_color_inliers: float = 0.9


@dataclass
class ReinitConfig:
    """Coarse poses from features as extra starts of the dense refinement when the motion prior is
    not trustworthy: after a gap in the timestamps or at the first frame tracked after a pose was
    set, with no velocity yet (searched first), or after a large predicted
    motion (searched first in a slow stream, see ``system.slow_stream_interval_s``, else only
    when the refinement from the prior fails the quality test) (slam/tracking/reinit.py)."""

    enabled: bool = True
    gap_factor: float = 2.0           # a frame more than this x the usual interval after the last = gap
    max_prior_shift: float = 0.05     # m: a motion prior predicting more than this is not trusted ...
    max_prior_turn_deg: float = 3.0   # ... nor one turning more than this
    keyframes: int = 2                # newest keyframes matched (ORB + PnP) for coarse poses


@dataclass
class RelocaliseConfig:
    """Finding the camera in a map it lost (or in a saved map): see slam/tracking/relocalise.py."""

    after_failures: int = 2         # SLAM: consecutive tracking failures before relocalising
    after_failures_saved_map: int = 5  # saved map: consecutive failed verifications before
                                    # relocalising again (views leaving the saved map fail
                                    # verification while the local layer still tracks them)
    max_skip: int = 16              # while lost, attempts back off to one every N frames
    coarse_width: int = 40          # px: render-and-compare candidates are scored at this width
    top_k: int = 4                  # best keyframe poses perturbed and scored
    refine_k: int = 3               # render-and-compare candidates refined by the tracker
    pnp_k: int = 8                  # best-scoring keyframes matched with ORB + PnP
    pnp_refine: int = 2             # PnP candidates refined by the tracker
    shift: float = 0.1              # m: perturbation of the candidate poses
    angle_deg: float = 8.0          # pan/tilt perturbation of the candidate poses
    min_coverage: float = 0.3       # accept: share of valid-depth pixels the map covers ...
    min_agreement: float = 0.7      # ... and share of those where depth and colour agree
    use_features: bool = True       # ORB + PnP candidates (OpenCV)


@dataclass
class MappingConfig:
    iters: int = 30                 # optimisation iterations per new keyframe
    cuda_graph: bool = True         # on CUDA: a keyframe's steps replay one captured CUDA graph
                                    # (slam/mapping/step_graph.py; not with refine_poses); false:
                                    # the same kernels queued one by one, as on the CPU
    final_iters: int = 300          # refinement steps over all keyframes at the end of input
    window: int = 6                 # recent keyframes optimised together
    random_keyframes: int = 2       # older keyframes added at random per step
    max_keyframes: int = 200        # keyframes kept (compact, host memory); oldest covisible dropped
    keyframe_every: int = 10        # a keyframe at least every N frames (10: 30 % fewer keyframes
                                    # than 5 on 7-Scenes, the same ATE on the suite, but a map
                                    # ~17 % larger there: pruner.every counts keyframes;
                                    # docs/benchmarks.md#why-the-defaults-are-what-they-are) ...
    keyframe_translation: float = 0.05  # ... or after this many metres ...
    keyframe_rotation_deg: float = 5.0  # ... or this many degrees
    keyframe_downscale: Optional[int] = None  # stored keyframes = input / this factor; null =
                                    # tracking.downscale (map at the resolution the tracker sees)
    lr_means: float = 0.001
    lr_radii: float = 0.01          # on log radius
    lr_colors: float = 0.02
    lr_opacities: float = 0.05      # on opacity logit
    depth_weight: float = 1.0
    densify_alpha: float = 0.9      # add spheres where rendered alpha is below this ...
    densify_depth_error: float = 0.05  # ... or depth error above this (m) in front of the surface
    densify_color_error: float = 1.0   # ... or mean |colour error| above this (0-1; 1 = off)
    densify_stride: int = 2         # sample every n-th pixel when adding spheres
    radius_scale: float = 0.5       # initial radius = scale * stride * z / f (half a grid cell)
    initial_opacity: float = 0.9
    # Keyframe pose refinement (slam/mapping/pose_refine.py): every window keyframe's pose but the
    # gauge's (the first keyframe, and a saved map's keyframes) is optimised with the spheres by
    # Adam on a small se(3) increment, gradients through the rasterizer's backward. Off by
    # default: on real data it has not paid yet (7-Scenes on the H200:
    # docs/benchmarks.md#why-the-defaults-are-what-they-are); the synthetic sample gains.
    refine_poses: bool = False
    lr_pose_rot: float = 0.0002     # rad per Adam step (rotation about the camera centre)
    lr_pose_trans: float = 0.0002   # m per Adam step
    seam_iters: int = 40            # steps over the loop's keyframes after a loop correction


@dataclass
class LoopConfig:
    """Loop closure (slam/loop/): revisit detection among keyframes, geometric verification, a
    pose graph of keyframes (gtsam) and the map moved with its keyframes."""

    enabled: bool = True            # needs gtsam (optional dependency; missing = logged, off)
    queue_size: int = 8             # keyframes waiting for the loop stage; when full the mapper
                                    # skips loop detection for a keyframe (never blocks)
    min_separation: int = 10        # candidates are at least this many keyframes older, and a loop
                                    # closes at least this many keyframes after the last one
                                    # (ORB-SLAM's rule: the loops found right after a closure are
                                    # kept as edges for the next one, not applied on their own) ...
    max_distance: float = 1.5       # ... with a camera centre within this many metres (drift bound)
    min_similarity: float = 0.5     # global descriptor (normalised thumbnail) correlation to be a candidate
    top_k: int = 3                  # best candidates verified per keyframe
    min_pnp_inliers: int = 30       # ORB + PnP RANSAC inliers to go on to the depth checks
    icp_iters: int = 10             # point-to-plane ICP iterations on the two keyframes' depths
    depth_tol: float = 0.03         # m: a point agrees when within depth_tol + quality.depth_noise_quad z^2
    min_overlap: float = 0.3        # share of the keyframe's points that land in the other's view
    min_inliers: float = 0.7        # share of those that agree in depth after ICP
    min_render_agreement: float = 0.6  # render-and-compare: share of the covered pixels where
                                    # the map rendered at the loop pose agrees with the depth
    min_depth_inliers: float = 0.9  # the dense alignment with the old map must have at least these
    min_color_inliers: float = 0.7  # shares of depth / colour inliers (quality.*'s absolute test with
                                    # stricter floors: a wrong loop bends the whole trajectory, and a
                                    # one-off alignment has no recent level to be judged against)
    min_correction: float = 0.005   # m: a verified loop moving the keyframe less than this ...
    min_correction_deg: float = 0.3 # ... and turning it less than this is recorded, not applied
    # Acceptance (slam/loop/acceptance.py): a loop is closed only when its two keyframes are this
    # far apart in time and the camera went this far away from the old keyframe's in between (a
    # camera turning in place re-observes, it does not loop: tracking against the map) ...
    min_separation_s: float = 2.0
    min_excursion_m: float = 0.4
    consistent_detections: int = 2  # ... this many consecutive keyframes detect the same loop and
                                    # their measurements agree (1 = no consistency check) ...
    significance: float = 0.99      # ... and its correction is beyond this chi-square probability of
                                    # its own measurement's noise (0 = any correction above min_correction)
    guard: bool = True              # keep a correction only if the keyframes' depths agree better
                                    # across and along the loop after it (slam/loop/guard.py)
    backend: Literal["gnc", "dcs", "cauchy", "huber"] = "gnc"  # the pose graph's robust back end
                                    # for loop edges (slam/loop/pose_graph.py)
    odometry_sigma_trans: float = 0.01    # m: odometry edge std-dev between consecutive keyframes
    odometry_sigma_rot_deg: float = 0.5   # deg
    loop_sigma_trans: float = 0.01        # m: a loop or bridge edge's std-dev where its measurement
    loop_sigma_rot_deg: float = 0.5       # deg   has no information of its own


@dataclass
class MapConfig:
    max_spheres: int = 2_000_000    # hard budget, never exceeded
    max_mb: Optional[float] = None  # optional hard budget in megabytes of parameters
    chunk: int = 65536              # capacity grows in chunks of this many spheres


@dataclass
class PrunerConfig:
    enabled: bool = True
    every: int = 5                  # prune after every N keyframes
    window: int = 3                 # a score must stay low over this many prune rounds
    weight_ema: float = 0.5         # EMA factor of the per-keyframe statistics
    score_error_weight: float = 1.0 # how much low reprojection error raises importance
    threshold: float = 0.3          # importance below this (relative to the median) is low
    min_opacity: float = 0.05       # transparent spheres are removed
    max_radius_px: float = 60.0     # oversized spheres (screen radius) are removed
    explore_keep: float = 0.5       # threshold multiplier while exploring new space (keeps more)
    revisit_prune: float = 2.0      # threshold multiplier while revisiting known space


@dataclass
class OutputConfig:
    root: str = "runs"              # run folders are created under this
    name: Optional[str] = None      # run folder name; None = timestamped
    save_map: bool = True
    mesh: bool = False              # TSDF mesh export (open3d)
    plots: bool = True
    eval_images_every: int = 1      # evaluate PSNR/SSIM on every n-th keyframe
    autosave_every: int = 20        # save map, side file and partial metrics every N keyframes
                                    # (atomically, for a run killed hard); 0 = only at the end


@dataclass
class ViewerConfig:
    """The rerun live view (slam/output/viewer.py, docs/VIEWER.md)."""

    enabled: bool = False           # spawn / connect to a rerun viewer
    rrd: Optional[str] = None       # record to this .rrd file instead
    map_every: int = 10             # log the map every N frames
    max_points: int = 100_000
    # Serve the live view to browsers on the network (run_slam --serve): rerun's gRPC server
    # (the data, TCP grpc_port, bound to `bind`) and its web viewer page (TCP web_port, all
    # interfaces: rerun-sdk has no bind option for it; 0 = no page). bind 127.0.0.1 = this
    # machine only (reach it with ssh -L). The server keeps up to server_memory_mb of the
    # recording for browsers that connect late (oldest data dropped first; it counts in the
    # process's memory, on a Jetson in the shared DRAM).
    serve: bool = False
    bind: str = "0.0.0.0"
    grpc_port: int = 9876
    web_port: int = 9090
    server_memory_mb: float = 256.0


@dataclass
class GridConfig:
    """The 2D occupancy grid for navigation (slam/grid/, docs/NAVIGATION.md): built from the
    keyframes' depth at their current poses on a thread of its own; saved as map.pgm + map.yaml
    (map_server) and map_grid.png; published on /map by the ROS nodes."""

    enabled: bool = True            # CPU cost per keyframe and memory: docs/NAVIGATION.md
    resolution: float = 0.05        # m, cell size
    min_height: float = 0.10        # m above the floor: surface points lower than this are floor
                                    # (free), from here up to max_height they are obstacles
    max_height: float = 1.0         # m above the floor: the robot's height; higher points
                                    # (ceiling, shelves above the robot) are not obstacles
    free_coverage: float = 0.8      # a cell is free only when no voxel of its column in the band
                                    # is occupied and at least this share of them was seen free:
                                    # rays under a table or above an occluded top see only part of
                                    # the column (sample, ground-truth poses: IoU occupied / free
                                    # 0.84 / 0.91 when one free voxel sufficed, 0.98 / 0.99 at 0.8)
    min_range: float = 0.2          # m, depth nearer than this is not used
    max_range: float = 4.0          # m along the ray: farther points are not obstacles; their
                                    # rays clear space up to this distance
    points_per_keyframe: int = 2400 # depth pixels taken per keyframe (an even sub-grid, e.g.
                                    # 57 x 42): 4800 cost 3x the CPU time on 7-Scenes (33 vs 11
                                    # ms a keyframe, one core) for no better grid on the sample
                                    # (IoU 0.92 / 0.95 vs 0.93 / 0.96 with SLAM poses)
    floor: Literal["auto", "camera"] = "auto"   # auto: the dominant horizontal plane of the
                                    # keyframes' depth (data without gravity: 7-Scenes, TUM
                                    # hand-held); camera: a camera on a robot at camera_height
                                    # above the floor, its optical axis camera_tilt_deg below
                                    # the horizon, no roll (at the first keyframe)
    camera_height: float = 0.0      # m, floor: camera
    camera_tilt_deg: float = 0.0    # deg, floor: camera (positive: looking down)
    floor_keyframes: int = 3        # floor auto: first estimate after this many keyframes; it is
                                    # estimated again whenever their number has doubled, and the
                                    # grid rebuilt when the floor moved (floor_rebuild_deg / _m)
    floor_rebuild_deg: float = 0.5  # deg
    floor_rebuild_m: float = 0.02   # m
    log_odds_hit: float = 0.85      # per keyframe that sees an obstacle in a cell (p 0.7,
                                    # OctoMap's default); counts are kept, so a keyframe's
                                    # evidence can be taken out exactly when its pose moves
    log_odds_miss: float = -0.4     # per keyframe whose rays cross the cell in the height band
                                    # (p 0.4)
    occupied_thresh: float = 0.65   # a voxel (so its cell) is occupied above this probability:
                                    # one keyframe's hit (0.85) with at most half a miss against it
    free_thresh: float = 0.35       # a voxel is free below this: two keyframes' misses (0.31); the
                                    # grid on /map and in map.pgm is trinary (map_server's 0 / 100
                                    # / -1, what Nav2's static layer expects). Sample, true poses:
                                    # 0.196 (four misses) left 134 free cells after 6 keyframes
                                    # (0.35: 396) for IoU 0.97 / 0.98 at the end (0.35: 0.95 / 0.97)
    reintegrate_m: float = 0.02     # m: a keyframe whose pose moved this far (or
    reintegrate_deg: float = 0.5    # deg  turned this much) since it was integrated is
                                    # integrated again at its new pose (loop closure, refinement)
    max_reintegrations: int = 20    # keyframes re-integrated per update at most (the largest
                                    # moves first; the rest in the next updates; all at the end)


@dataclass
class SystemConfig:
    device: str = "auto"            # "auto" | "cpu" | "cuda" | "cuda:1"
    threaded: bool = True           # False = deterministic single-thread mode
    queue_size: int = 4             # frames waiting for the tracking thread
    max_unmapped_keyframes: int = 0 # threaded: keyframes handed to the mapper and not yet in the
                                    # published map; the tracker waits before handing over one
                                    # more, so it never tracks against a map more than this many
                                    # keyframes old. 0: each keyframe is mapped before the next
                                    # frame is tracked: on the H200 as fast as 1 since the mapper's
                                    # step graph, as accurate on the real sequences, and the
                                    # generated loop's snap is found (1.45 vs 2.13 cm); with 4 the
                                    # tracker lost accuracy on maps 5 keyframes stale
                                    # (docs/benchmarks.md#why-the-defaults-are-what-they-are). The
                                    # Jetson configs keep 1: there the mapper is the slower thread.
                                    # Sequential (threaded: false): each keyframe is mapped this
                                    # many keyframes late, the threaded worst case (deterministic)
    slow_stream_interval_s: float = 0.1  # s: a stream whose usual frame interval is longer is slow:
                                    # a large predicted motion searches features before the
                                    # refinement, and (threaded) each keyframe is mapped before the
                                    # next frame is tracked, as a live mapper finishes it between
                                    # such frames (slam/tracking/stream_clock.py). At camera rate
                                    # the search runs only when the refinement from the prior
                                    # fails, and the tracker runs max_unmapped_keyframes ahead
    switch_interval_ms: Optional[float] = 0.5  # threaded: Python's thread switch interval
                                    # (sys.setswitchinterval) during the run; null: Python's own,
                                    # 5 ms. A thread that wakes from a GPU wait (the tracker, the
                                    # mapper) waits up to this long for the interpreter while the
                                    # loop or grid thread runs Python: H200 suite at 0.5 vs 5 ms,
                                    # 7-Scenes 73.8 vs 62.4 FPS, the sample 70.0 vs 54.1, the same
                                    # ATE (docs/benchmarks.md#why-the-defaults-are-what-they-are)
    seed: int = 0
    progress: bool = True
    profile_frames: int = 0         # CUDA: after the run, track the last frame again this many
                                    # times under torch.profiler for metrics.json's per-frame GPU
                                    # ms, GPU operations, host launch calls, host ms without and
                                    # with the waits for the GPU (e.g. 5); 0 = off: loading the
                                    # profiler (CUPTI and the libraries it pulls in) set the
                                    # run's peak RSS on the H200 (docs/benchmarks.md#host-memory)


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    raster: RasterConfig = field(default_factory=RasterConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)
    reinit: ReinitConfig = field(default_factory=ReinitConfig)
    relocalise: RelocaliseConfig = field(default_factory=RelocaliseConfig)
    mapping: MappingConfig = field(default_factory=MappingConfig)
    map: MapConfig = field(default_factory=MapConfig)
    pruner: PrunerConfig = field(default_factory=PrunerConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    viewer: ViewerConfig = field(default_factory=ViewerConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    system: SystemConfig = field(default_factory=SystemConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


