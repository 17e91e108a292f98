"""Constants of the sphere model. rasterizer/csrc/sphere_math.h holds the same numbers for the
C++/CUDA kernels; tests/test_rasterizer_reference.py checks that the two agree."""

NEAR = 0.01          # spheres with z <= NEAR (metres) are culled
FAR = 100.0          # spheres with z > FAR (metres) are culled
LOW_PASS = 0.3       # px^2 added to the screen-space variance on each axis
ALPHA_MAX = 0.99     # a = min(ALPHA_MAX, o * G)
ALPHA_MIN = 1.0 / 255.0   # a < ALPHA_MIN: the sphere is skipped at that pixel
T_MIN = 1e-4         # a pixel stops before its transmittance would drop to <= T_MIN
CUTOFF_Q = 9.0       # pixels outside the 3-sigma ellipse (q > 9) are skipped
TILE = 16            # tile side (px) of the tiled backends
DEPTH_EPS = 1e-6     # depth = accumulated depth / alpha where alpha > DEPTH_EPS, else 0
