// Order statistics shared by the CPU (median_cpu.cpp) and CUDA (median_cuda.cu) kernels; the model
// is in rasterizer/median.py: the lower median of every value (a NaN among them: NaN) or of a depth
// image's valid values (frame_math.h's valid_depth; none: kNoMedianDepth).
#pragma once

#include <stdint.h>

#include "frame_math.h"

namespace sr {

constexpr float kNoMedianDepth = 1.f;   // the median depth of an image without a valid value, m

// Whether the median counts value v: a valid depth, or (every value) anything but NaN.
SR_FRAME_HD bool median_counts(float v, bool depth) { return depth ? valid_depth(v) : v == v; }

// A float's bit pattern as an unsigned key in the floats' order (negative ones reversed), and back.
SR_FRAME_HD uint32_t order_key(uint32_t bits) { return bits ^ ((bits >> 31) ? 0xffffffffu : 0x80000000u); }
SR_FRAME_HD uint32_t key_bits(uint32_t key) { return key ^ ((key >> 31) ? 0x80000000u : 0xffffffffu); }

}  // namespace sr
