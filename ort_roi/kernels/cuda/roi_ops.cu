// ort_roi CUDA kernels (CuPy RawModule): the contract's arithmetic in T, compiled with
// --fmad=false so products are rounded as NumPy rounds them. Boxes arrive validated, as rows
// of T [R, K] whose column 0 is the batch index (an integer value, checked on the host) and
// whose next columns are [x1, y1, x2, y2] (or the rotated kernel's geometry).
//
// One thread computes one bin [ph, pw] of one box for a block of CB consecutive channels
// (a template parameter: the loader picks it per call, as many as leave enough threads):
// the bin's geometry (edges, sample positions, bilinear weights) is worked out once and
// applied to CB channels. Threads of a warp hold neighbouring bins of the same box, so their
// reads of X are close together and their writes of the output contiguous.
//
// The same source builds on the host with ORT_ROI_HOST (tests/cuda_host.cpp), where the
// grid-stride loop simply visits every element.

#ifndef ORT_ROI_HOST
#define ORT_ROI_LOOP(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)blockDim.x * gridDim.x)
#define ORT_ROI_DEVICE __device__ __forceinline__
#endif

// A bin edge in T clipped to [0, size]; NaN (0 * inf on a box whose size overflows T) is 0.
template <typename T>
ORT_ROI_DEVICE int clip_edge(T e, int size) {
  if (isnan(e) || e <= 0) return 0;
  if (e >= (T)size) return size;
  return (int)e;
}

// Work item i: box r, channels [c0, c1), bin (ph, pw).
struct Bin {
  long long r;
  int c0, c1, ph, pw;
};

template <int CB>
ORT_ROI_DEVICE Bin unravel(long long i, int C, int PH, int PW) {
  const int NCB = (C + CB - 1) / CB;
  Bin b;
  int cb;
  if (i <= 0x7fffffffLL) {  // 32-bit division: several times fewer instructions on a GPU
    unsigned u = (unsigned)i;
    b.pw = (int)(u % (unsigned)PW);
    u /= (unsigned)PW;
    b.ph = (int)(u % (unsigned)PH);
    u /= (unsigned)PH;
    cb = (int)(u % (unsigned)NCB);
    b.r = (long long)(u / (unsigned)NCB);
  } else {
    b.pw = (int)(i % PW);
    b.ph = (int)((i / PW) % PH);
    cb = (int)((i / ((long long)PW * PH)) % NCB);
    b.r = i / ((long long)PW * PH * NCB);
  }
  b.c0 = cb * CB;
  b.c1 = b.c0 + CB < C ? b.c0 + CB : C;
  return b;
}

// ROIPooling max / RoIPool: boxes [R, 4] = [x1, y1, x2, y2]; edges rounded half away from 0.
template <typename T, int CB>
__global__ void max_pool(const T* X, const T* rois, T* out,
                         long long n, int C, int H, int W, int PH, int PW, T scale) {
  ORT_ROI_LOOP(i, n) {
    Bin q = unravel<CB>(i, C, PH, PW);
    const T* b = rois + q.r * 5 + 1;
    const long long bi = (long long)rois[q.r * 5];
    T xs = round(b[0] * scale), ys = round(b[1] * scale);
    T xe = round(b[2] * scale), ye = round(b[3] * scale);
    T rh = ye - ys + (T)1, rw = xe - xs + (T)1;
    rh = (rh > (T)1 || isnan(rh)) ? rh : (T)1;  // np.maximum keeps NaN
    rw = (rw > (T)1 || isnan(rw)) ? rw : (T)1;
    T bh = rh / (T)PH, bw = rw / (T)PW;
    int h0 = clip_edge(floor((T)q.ph * bh) + ys, H);
    int h1 = clip_edge(ceil((T)(q.ph + 1) * bh) + ys, H);
    int w0 = clip_edge(floor((T)q.pw * bw) + xs, W);
    int w1 = clip_edge(ceil((T)(q.pw + 1) * bw) + xs, W);
    T* o = out + ((q.r * C + q.c0) * PH + q.ph) * PW + q.pw;
    for (int c = q.c0; c < q.c1; ++c, o += (long long)PH * PW) {
      T m = 0;
      if (h1 > h0 && w1 > w0) {
        const T* x = X + (bi * C + c) * (long long)H * W;
        m = x[(long long)h0 * W + w0];
        for (int h = h0; h < h1; ++h)
          for (int w = w0; w < w1; ++w) {
            T v = x[(long long)h * W + w];
            if (v > m || isnan(v)) m = v;  // NaN propagates, as np.maximum
          }
      }
      *o = m;
    }
  }
}

// One bilinear coordinate of ROIPooling bilinear (OpenVINO), as ort_roi computes it.
template <typename T>
ORT_ROI_DEVICE T bilinear_coord(T lo, T hi, int p, int pooled, int size) {
  T extent = (T)(size - 1);
  if (pooled == 1) return (lo + hi) * (T)0.5 * extent;
  if (p == pooled - 1) return hi * extent;
  T step = (hi - lo) * extent / (T)(pooled - 1);
  return (T)p * step + lo * extent;
}

template <typename T, int CB>
__global__ void bilinear_pool(const T* X, const T* rois, T* out,
                              long long n, int C, int H, int W, int PH, int PW) {
  ORT_ROI_LOOP(i, n) {
    Bin q = unravel<CB>(i, C, PH, PW);
    const T* b = rois + q.r * 5 + 1;
    const long long bi = (long long)rois[q.r * 5];
    T y = bilinear_coord(b[1], b[3], q.ph, PH, H);
    T x = bilinear_coord(b[0], b[2], q.pw, PW, W);
    T* o = out + ((q.r * C + q.c0) * PH + q.ph) * PW + q.pw;
    const long long step = (long long)PH * PW;
    if (!(y >= 0 && y <= (T)(H - 1) && x >= 0 && x <= (T)(W - 1))) {
      for (int c = q.c0; c < q.c1; ++c, o += step) *o = 0;
      continue;
    }
    int y0 = (int)floor(y), x0 = (int)floor(x);
    int y1 = (int)ceil(y), x1 = (int)ceil(x);
    y1 = y1 < H - 1 ? y1 : H - 1;
    x1 = x1 < W - 1 ? x1 : W - 1;
    T dy = y - (T)y0, dx = x - (T)x0;
    for (int c = q.c0; c < q.c1; ++c, o += step) {
      const T* p = X + (bi * C + c) * (long long)H * W;
      T tl = p[(long long)y0 * W + x0], tr = p[(long long)y0 * W + x1];
      T bl = p[(long long)y1 * W + x0], br = p[(long long)y1 * W + x1];
      T top = tl + (tr - tl) * dx;
      T bottom = bl + (br - bl) * dx;
      *o = top + (bottom - top) * dy;
    }
  }
}

// Position-sensitive average pooling over integer bins (Paddle psroi_pool, torchvision
// ps_roi_pool): the host computes each box's bins (geometry.psroi_bins /
// torchvision_psroi_bins), rows [R, 1 + 2*PH + 2*PW] = [batch, row lo[PH], row hi[PH],
// column lo[PW], column hi[PW]]; output (c, ph, pw) is the mean of input channel
// (c*PH + ph)*PW + pw over its bin, summed row by row in T, 0 if empty.
template <typename T, int CB>
__global__ void psroi_pool(const T* X, const T* rows, T* out,
                           long long n, int C_in, int OC, int H, int W, int PH, int PW) {
  ORT_ROI_LOOP(i, n) {
    Bin q = unravel<CB>(i, OC, PH, PW);
    const T* row = rows + q.r * (1 + 2 * PH + 2 * PW);
    const long long bi = (long long)row[0];
    const int h0 = (int)row[1 + q.ph], h1 = (int)row[1 + PH + q.ph];
    const int w0 = (int)row[1 + 2 * PH + q.pw], w1 = (int)row[1 + 2 * PH + PW + q.pw];
    T* o = out + ((q.r * OC + q.c0) * PH + q.ph) * PW + q.pw;
    for (int c = q.c0; c < q.c1; ++c, o += (long long)PH * PW) {
      if (h1 <= h0 || w1 <= w0) {
        *o = 0;
        continue;
      }
      int ch = (c * PH + q.ph) * PW + q.pw;
      const T* x = X + (bi * C_in + ch) * (long long)H * W;
      T sum = x[(long long)h0 * W + w0];
      for (int h = h0; h < h1; ++h)
        for (int w = w0; w < w1; ++w)
          if (h != h0 || w != w0) sum += x[(long long)h * W + w];
      *o = sum / (T)((long long)(h1 - h0) * (w1 - w0));
    }
  }
}

// --- RoIAlign family ------------------------------------------------------------------------

// One bilinear sample as the references compute it: four positions in a channel plane and
// their weights hy*hx, hy*lx, ly*hx, ly*lx. A sample beyond one pixel off the map has
// weights 0 at position 0 (mmcv's pre_calc), so it contributes 0 (and is a candidate 0 of a
// max).
template <typename T>
struct Taps {
  long long p[4];
  T w[4];
};

template <typename T>
ORT_ROI_DEVICE Taps<T> taps(int H, int W, T y, T xx) {
  Taps<T> t;
  if (y < (T)-1 || y > (T)H || xx < (T)-1 || xx > (T)W) {
    for (int k = 0; k < 4; ++k) {
      t.p[k] = 0;
      t.w[k] = 0;
    }
    return t;
  }
  y = y > 0 ? y : (T)0;
  xx = xx > 0 ? xx : (T)0;
  int yl = (int)floor(y), xl = (int)floor(xx), yh, xh;
  T ly, lx;
  if (yl >= H - 1) { yl = yh = H - 1; ly = 0; } else { yh = yl + 1; ly = y - (T)yl; }
  if (xl >= W - 1) { xl = xh = W - 1; lx = 0; } else { xh = xl + 1; lx = xx - (T)xl; }
  T hy = (T)1 - ly, hx = (T)1 - lx;
  t.p[0] = (long long)yl * W + xl;
  t.p[1] = (long long)yl * W + xh;
  t.p[2] = (long long)yh * W + xl;
  t.p[3] = (long long)yh * W + xh;
  t.w[0] = hy * hx;
  t.w[1] = hy * lx;
  t.w[2] = ly * hx;
  t.w[3] = ly * lx;
  return t;
}

// The sample's value in one channel plane: w1*v1 + w2*v2 + w3*v3 + w4*v4.
template <typename T>
ORT_ROI_DEVICE T tap_value(const Taps<T>& t, const T* x) {
  return t.w[0] * x[t.p[0]] + t.w[1] * x[t.p[1]] + t.w[2] * x[t.p[2]] + t.w[3] * x[t.p[3]];
}

// std::max(a, b) as onnxruntime uses it: a < b ? b : a.
template <typename T>
ORT_ROI_DEVICE T std_max(T a, T b) { return a < b ? b : a; }

// onnxruntime's RoiAlign max: the largest weighted corner of the sample,
// max(max(max(w1*v1, w2*v2), w3*v3), w4*v4).
template <typename T>
ORT_ROI_DEVICE T tap_corner_max(const Taps<T>& t, const T* x) {
  return std_max(std_max(std_max(t.w[0] * x[t.p[0]], t.w[1] * x[t.p[1]]), t.w[2] * x[t.p[2]]),
                 t.w[3] * x[t.p[3]]);
}

// Sample k of g along a bin side that starts at a: a + (k + 0.5)*b/g, as the references place it.
template <typename T>
ORT_ROI_DEVICE T sample_at(T a, T b, int g, int k) {
  return a + ((T)k + (T)0.5) * b / (T)g;
}

// The first k in [0, g) whose z = (b >= 0 ? y : -y) is >= edge (> edge when ``strict``), g if
// none: z is monotone in k (non-decreasing), so a binary search.
template <typename T>
ORT_ROI_DEVICE int first_from(T a, T b, int g, T edge, bool strict) {
  int lo = 0, hi = g;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    const T y = sample_at(a, b, g, mid);
    const T z = b >= 0 ? y : -y;
    if (strict ? z > edge : z >= edge) hi = mid; else lo = mid + 1;
  }
  return lo;
}

// The samples [lo, hi) of a bin side that a max needs: those within one pixel of the map
// (-1 <= y <= size) and one off-map neighbour each side. Every sample beyond one pixel off
// the map reads 0 weights at pixel 0 (the same value), so a huge box's max costs in
// proportion to the map, not to its grid.
template <typename T>
ORT_ROI_DEVICE void max_span(T a, T b, int g, int size, int& lo, int& hi) {
  const bool up = b >= 0;
  const int first = first_from(a, b, g, up ? (T)-1 : -(T)size, false);  // the first within
  const int past = first_from(a, b, g, up ? (T)size : (T)1, true);  // the first beyond
  lo = first > 0 ? first - 1 : 0;
  hi = past < g ? past + 1 : g;
}

// RoIAlign (Paddle / detectron2) and MMCVRoiAlign: over bin (ph, pw) of a box, the mean
// (mode 0) or the max (mode 1: a running maximum from ``empty``, mmcv's -10000 or
// mmdeploy's -FLT_MAX, replaced only by a larger value, NaN never) of gh x gw bilinear
// samples, or (mode 2, onnxruntime's RoiAlign max) the largest over the samples of their
// largest weighted corner, 0 without samples; the samples at
// y = (y0 + ph*bin_h) + (iy + 0.5)*bin_h/gh, x likewise. The box's geometry comes from the
// host, computed once in T (``ALIGN_ROW`` in _cupy.py): g = [y0, x0, bin_h, bin_w, gh, gw].
// Position-sensitive (ps = 1, torchvision ps_roi_align): output channel c of bin (ph, pw)
// reads input channel (c*PH + ph)*PW + pw of the C_in = C*PH*PW channels.
template <typename T, int CB>
ORT_ROI_DEVICE void align_bin(const T* X, const T* g, long long bi, const Bin& q, T* out,
                              int C, int H, int W, int PH, int PW, int mode, T empty,
                              int ps = 0) {
  const T y0 = g[0], x0 = g[1], bh = g[2], bw = g[3];
  const int gh = (int)g[4], gw = (int)g[5];
  T acc[CB];
  for (int k = 0; k < CB; ++k) acc[k] = mode == 1 ? empty : (T)0;
  const long long plane0 = (long long)H * W;
  const long long c_in = ps ? (long long)q.c0 * PH * PW + q.ph * PW + q.pw : q.c0;
  const T* x = X + (bi * (ps ? (long long)C * PH * PW : C) + c_in) * plane0;
  const long long plane = ps ? plane0 * PH * PW : plane0;  // from one channel to the next
  const int nc = q.c1 - q.c0;
  const T ay = y0 + (T)q.ph * bh, ax = x0 + (T)q.pw * bw;
  int iy0 = 0, iy1 = gh, ix0 = 0, ix1 = gw;  // the mean: every sample
  if (mode != 0 && gh > 0 && gw > 0) {  // a max: the samples on the map and a neighbour each
    max_span(ay, bh, gh, H, iy0, iy1);
    max_span(ax, bw, gw, W, ix0, ix1);
  }
  for (int iy = iy0; iy < iy1; ++iy) {
    T y = sample_at(ay, bh, gh, iy);
    for (int ix = ix0; ix < ix1; ++ix) {
      T xx = sample_at(ax, bw, gw, ix);
      Taps<T> t = taps(H, W, y, xx);
      const bool first = iy == iy0 && ix == ix0;
      for (int k = 0; k < CB; ++k) {
        if (k >= nc) break;
        if (mode == 2) {
          T v = tap_corner_max(t, x + k * plane);
          acc[k] = first ? v : std_max(acc[k], v);
          continue;
        }
        T v = tap_value(t, x + k * plane);
        if (mode == 0) acc[k] += v;
        else if (v > acc[k]) acc[k] = v;
      }
    }
  }
  const int count = gh * gw;
  T* o = out + ((q.r * C + q.c0) * PH + q.ph) * PW + q.pw;
  for (int k = 0; k < nc; ++k, o += (long long)PH * PW)
    *o = mode ? acc[k] : (count > 0 ? acc[k] / (T)count : (T)0);  // mode 2: 0 if no samples
}

// rows [R, 7] = [batch, y0, x0, bin_h, bin_w, gh, gw]; a grid of -1: the host computes the
// box (its samples exceed what one thread should loop over), the kernel leaves it alone.
// C: the output's channels (ps = 1: X holds C*PH*PW, position-sensitive).
template <typename T, int CB>
__global__ void roi_align(const T* X, const T* rows, T* out, long long n, int C, int H, int W,
                          int PH, int PW, int mode, T empty, int ps) {
  ORT_ROI_LOOP(i, n) {
    Bin q = unravel<CB>(i, C, PH, PW);
    const T* row = rows + q.r * 7;
    if (row[5] < 0) continue;
    align_bin<T, CB>(X, row + 1, (long long)row[0], q, out, C, H, W, PH, PW, mode, empty, ps);
  }
}

// Multi-level RoIAlign in one launch: rows [R, 10] = [batch, y0, x0, bin_h, bin_w, gh, gw,
// level, H, W] (level -1: on no level, the output is left as it is; grid -1: the host computes
// the box); level l's map is X0 .. X5.
template <typename T, int CB>
__global__ void roi_align_levels(const T* X0, const T* X1, const T* X2, const T* X3,
                                 const T* X4, const T* X5, const T* rows, T* out, long long n,
                                 int C, int PH, int PW, int mode, T empty) {
  ORT_ROI_LOOP(i, n) {
    Bin q = unravel<CB>(i, C, PH, PW);
    const T* row = rows + q.r * 10;
    const int l = (int)row[7];
    if (l < 0 || row[5] < 0) continue;
    const T* X = l == 0 ? X0 : l == 1 ? X1 : l == 2 ? X2 : l == 3 ? X3 : l == 4 ? X4 : X5;
    align_bin<T, CB>(X, row + 1, (long long)row[0], q, out, C, (int)row[8], (int)row[9], PH,
                     PW, mode, empty);
  }
}

// MMCVRoIAlignRotated (mmcv roi_align_rotated, CPU forward): per box the host computes, in
// T, rows [batch, cy', cx', start_h, start_w, bin_h, bin_w, cos, sin, gh, gw] (grid -1: too
// many samples, computed on the host). Sample (iy, ix) of bin (ph, pw):
// yy = start_h + ph*bin_h + (iy + .5)*bin_h/gh (xx likewise), rotated about the centre:
// y = yy*cos - xx*sin + cy', x = yy*sin + xx*cos + cx'; the mean over max(gh*gw, 1).
template <typename T, int CB>
__global__ void roi_align_rotated(const T* X, const T* rois, T* out, long long n, int C,
                                  int H, int W, int PH, int PW) {
  ORT_ROI_LOOP(i, n) {
    Bin q = unravel<CB>(i, C, PH, PW);
    const T* g = rois + q.r * 11 + 1;
    const long long bi = (long long)rois[q.r * 11];
    const int gh = (int)g[8], gw = (int)g[9];
    if (gh < 0 || gw < 0) continue;
    T acc[CB];
    for (int k = 0; k < CB; ++k) acc[k] = 0;
    const T* x = X + (bi * C + q.c0) * (long long)H * W;
    const long long plane = (long long)H * W;
    const int nc = q.c1 - q.c0;
    for (int iy = 0; iy < gh; ++iy) {
      T yy = (g[2] + (T)q.ph * g[4]) + ((T)iy + (T)0.5) * g[4] / (T)gh;
      for (int ix = 0; ix < gw; ++ix) {
        T xx = (g[3] + (T)q.pw * g[5]) + ((T)ix + (T)0.5) * g[5] / (T)gw;
        T y = yy * g[6] - xx * g[7] + g[0];
        T xr = yy * g[7] + xx * g[6] + g[1];
        Taps<T> t = taps(H, W, y, xr);
        for (int k = 0; k < CB; ++k) {
          if (k >= nc) break;
          acc[k] += tap_value(t, x + k * plane);
        }
      }
    }
    const int count = gh * gw > 1 ? gh * gw : 1;
    T* o = out + ((q.r * C + q.c0) * PH + q.ph) * PW + q.pw;
    for (int k = 0; k < nc; ++k, o += (long long)PH * PW) *o = acc[k] / (T)count;
  }
}

// CropAndResize (TensorFlow's crop_and_resize): X is NHWC [N, H, W, C] of T, the output float
// [R, CH, CW, C] (TensorFlow computes in float whatever T is). The host computes each box's
// geometry in float as TensorFlow does (geometry/crop_and_resize.py): geo int [R, 1 + 2*CH +
// 2*CW] = [batch, top[CH], bottom[CH], left[CW], right[CW]] (top or left -1: off the map, the
// extrapolation value) and w float [R, CH + CW] = [fy[CH], fx[CW]]. mode 0: bilinear, x first
// (top = tl + (tr - tl) * fx, bottom likewise), then top + (bottom - top) * fy; mode 1:
// nearest, the pixel at (top, left). One thread per output pixel and block of CB channels,
// channel blocks fastest, so a warp reads and writes neighbouring channels.
template <typename T, int CB>
__global__ void crop_and_resize(const T* X, const int* geo, const float* w, float* out,
                                long long n, int C, int H, int W, int CH, int CW, int mode,
                                float ext) {
  ORT_ROI_LOOP(i, n) {
    const long long NCB = (C + CB - 1) / CB;
    const int cb = (int)(i % NCB);
    long long j = i / NCB;
    const int x = (int)(j % CW);
    j /= CW;
    const int y = (int)(j % CH);
    const long long r = j / CH;
    const int* g = geo + r * (1 + 2LL * CH + 2LL * CW);
    const int top = g[1 + y], bottom = g[1 + CH + y];
    const int left = g[1 + 2 * CH + x], right = g[1 + 2 * CH + CW + x];
    const int c0 = cb * CB, nc = C - c0 < CB ? C - c0 : CB;
    float* o = out + ((r * CH + y) * CW + x) * (long long)C + c0;
    if (top < 0 || left < 0) {
      for (int k = 0; k < nc; ++k) o[k] = ext;
      continue;
    }
    const T* img = X + (long long)g[0] * H * W * C + c0;
    const T* tl = img + ((long long)top * W + left) * C;
    if (mode == 1) {
      for (int k = 0; k < nc; ++k) o[k] = (float)tl[k];
      continue;
    }
    const T* tr = img + ((long long)top * W + right) * C;
    const T* bl = img + ((long long)bottom * W + left) * C;
    const T* br = img + ((long long)bottom * W + right) * C;
    const float fy = w[r * (CH + CW) + y], fx = w[r * (CH + CW) + CH + x];
    for (int k = 0; k < nc; ++k) {
      const float a = (float)tl[k], b = (float)tr[k], c = (float)bl[k], d = (float)br[k];
      const float t = a + (b - a) * fx;
      const float u = c + (d - c) * fx;
      o[k] = t + (u - t) * fy;
    }
  }
}
